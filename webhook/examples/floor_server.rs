//! The load benchmark's floor: the same axum + axum-server + rustls (ring) stack, TCP_NODELAY,
//! self-signed ECDSA P-256 cert, as `koord-webhook serve --standalone`, but the handler only
//! parses the AdmissionReview (to echo the uid) and returns a fixed response.
//!
//! `cargo run --release -p koord-webhook --example floor_server -- 127.0.0.1:9444`

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use koord_runtime::install_crypto_provider;
use koord_webhook::server::tls::server_config;

#[path = "common/floor_review.rs"]
mod floor_review;

/// Same allocator as the webhook binary, so the floor differs only in the handler.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn floor(body: Bytes) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        floor_review::floor_review(&body),
    )
}

fn main() -> anyhow::Result<()> {
    install_crypto_provider();
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9444".into())
        .parse()?;
    let pem = koord_webhook::certs::self_signed(vec!["localhost".into(), "127.0.0.1".into()], 30)?;
    let tls = RustlsConfig::from_config(server_config(
        pem.cert_pem.as_bytes(),
        pem.key_pem.as_bytes(),
    )?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let app = Router::new().route("/mutate-pod", post(floor));
        let acceptor = RustlsAcceptor::new(tls).acceptor(NoDelayAcceptor::new());
        eprintln!("floor server on {addr}");
        // SIGTERM/SIGINT end main normally, as they end the webhook: an instrumented build
        // (webhook/benches/pgo.sh) writes its profile at exit, which a signal death skips.
        let handle = axum_server::Handle::new();
        let stop = handle.clone();
        tokio::spawn(async move {
            koord_runtime::shutdown_signal().await;
            stop.shutdown();
        });
        axum_server::bind(addr)
            .acceptor(acceptor)
            .handle(handle)
            .serve(app.into_make_service())
            .await
    })?;
    Ok(())
}
