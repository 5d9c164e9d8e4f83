//! The TLS acceptor: rustls with a handshake timeout, offering HTTP/2 in ALPN only while fewer
//! than `--max-h2-connections` HTTP/2 connections are open. Past that, a client is offered
//! HTTP/1.1 alone and is still served, one request at a time per connection.
//!
//! Why: an HTTP/2 connection is the expensive kind. It can hold a hundred streams, each with
//! its headers and state, plus up to its flow-control window of body bytes; a thousand of them
//! (within the connection cap) grew the process to about 2 GiB under the HTTP/2 abuse round
//! (docs/admission-server.md, "Abuse"). The apiserver needs a few: one per apiserver instance, more
//! only past a hundred admissions in flight on it.
//!
//! A slot is taken when the ClientHello offers `h2`, not at accept: a client that offers
//! HTTP/1.1 alone, or a TCP connection that never sends a ClientHello, holds none (a burst of
//! HTTP/1.1 handshakes used to take every slot and leave the apiserver on HTTP/1.1). A
//! connection that did not negotiate `h2` and speaks it anyway is closed by the first-bytes
//! acceptor (`connections.rs`), or the cap would bind only polite clients.
//!
//! The handshake's expensive step, the key exchange and the signature over the ClientHello's
//! answer (~150 µs of CPU, done at once when rustls takes the ClientHello), runs on the
//! blocking pool, at most one per core at a time, not on the runtime's workers: a request
//! on a kept-alive connection (the apiserver's) then never waits in a worker's queue behind
//! a flood's handshakes. Within one address a newcomer is never refused for the slots of
//! connections that have not completed a request (`koord_runtime::connections`), so a flood
//! that reconnects whatever is closed gets a handshake per attempt; on the workers, its waves
//! of handshakes took the lock-out round's kept-alive p99 from about 1 ms to 5-7 ms. The turns
//! at that step go to the addresses in rotation (`handshake_turns.rs`), so a new connection
//! does not wait behind another address's wave either.

use std::future::Future;
use std::io;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum_server::accept::Accept;
use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::server::Acceptor;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::connections::{AcceptedConnection, Guarded, GuardedStream};
use super::handshake_turns::HandshakeTurns;
use crate::metrics::Metrics;

/// The TLS layer over `inner` (the connection guard).
#[derive(Clone)]
pub struct TlsAcceptor<A> {
    inner: A,
    config: RustlsConfig,
    handshake_timeout: Duration,
    h2_open: Arc<AtomicUsize>,
    max_h2: usize,
    /// Turns at the key exchange and signature: one per core, shared by address.
    turns: Arc<HandshakeTurns>,
    metrics: Metrics,
}

impl<A> TlsAcceptor<A> {
    pub fn new(
        inner: A,
        config: RustlsConfig,
        handshake_timeout: Duration,
        max_h2: usize,
        metrics: Metrics,
    ) -> Self {
        TlsAcceptor {
            inner,
            config,
            handshake_timeout,
            h2_open: Arc::new(AtomicUsize::new(0)),
            max_h2,
            turns: HandshakeTurns::new(
                std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
            ),
            metrics,
        }
    }
}

/// One of the `--max-h2-connections`: held by an HTTP/2 connection (and, during the rest of
/// its handshake, by a client whose ClientHello offered `h2`), given back on drop.
struct H2Slot(Arc<AtomicUsize>);

impl H2Slot {
    fn try_take(open: &Arc<AtomicUsize>, max: usize) -> Option<H2Slot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| H2Slot(open.clone()))
    }
}

impl Drop for H2Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `config` with HTTP/1.1 alone in ALPN.
fn http1_only(config: &ServerConfig) -> Arc<ServerConfig> {
    let mut config = config.clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

impl<A, I, S> Accept<I, S> for TlsAcceptor<A>
where
    A: Accept<I, S>,
    A::Stream: AsyncRead + AsyncWrite + Guarded + Unpin + Send + 'static,
    A::Future: Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = TlsConnection<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let config = self.config.get_inner();
        let (timeout, open, max) = (self.handshake_timeout, self.h2_open.clone(), self.max_h2);
        let (turns, metrics) = (self.turns.clone(), self.metrics.clone());
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            let (source, held) = (stream.source(), stream.slot().clone());
            let handshake = async {
                let hello = LazyConfigAcceptor::new(Acceptor::default(), stream).await?;
                let offers_h2 = hello
                    .client_hello()
                    .alpn()
                    .is_some_and(|mut offered| offered.any(|p| p == b"h2"));
                let slot = offers_h2.then(|| H2Slot::try_take(&open, max)).flatten();
                let config = if offers_h2 && slot.is_none() {
                    metrics.connections_h2_withheld.inc();
                    http1_only(&config)
                } else {
                    config
                };
                // The key exchange and the signature, off the workers, in the address's turn
                // (see above); not for a connection evicted meanwhile.
                let evicted = || {
                    io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "closed for a new connection at the connection limit",
                    )
                };
                let turn = tokio::select! {
                    turn = turns.turn(source) => turn,
                    () = held.evicted() => return Err(evicted()),
                };
                let watched = held.clone();
                let answering = tokio::task::spawn_blocking(move || {
                    let _turn = turn;
                    (!watched.is_evicted()).then(|| hello.into_stream(config))
                });
                let answering = answering.await.map_err(io::Error::other)?;
                let tls = answering.ok_or_else(evicted)?.await?;
                // Its first request is up to the client now (connections.rs: who is evicted).
                held.set_up();
                // Kept only by a connection that did negotiate HTTP/2.
                let h2 = slot.filter(|_| tls.get_ref().1.alpn_protocol() == Some(b"h2"));
                io::Result::Ok((tls, h2))
            };
            let (tls, h2) = tokio::time::timeout(timeout, handshake)
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                })??;
            Ok((TlsConnection { tls, h2 }, service))
        })
    }
}

/// A TLS connection, holding its HTTP/2 slot (if it speaks HTTP/2) while it lives.
pub struct TlsConnection<T> {
    tls: TlsStream<T>,
    h2: Option<H2Slot>,
}

impl AcceptedConnection for TlsConnection<GuardedStream> {
    fn negotiated_h2(&self) -> bool {
        self.h2.is_some()
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsConnection<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsConnection<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tls).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h2_slots_are_capped_and_given_back() {
        let open = Arc::new(AtomicUsize::new(0));
        let a = H2Slot::try_take(&open, 2).expect("first");
        let _b = H2Slot::try_take(&open, 2).expect("second");
        assert!(H2Slot::try_take(&open, 2).is_none(), "beyond the cap");
        drop(a);
        assert!(H2Slot::try_take(&open, 2).is_some(), "given back");
        assert!(
            H2Slot::try_take(&open, 0).is_none(),
            "0 offers HTTP/2 to none"
        );
    }
}
