//! Serving certificates: `koord-webhook certs` (a CA plus a serving cert for the Service), the
//! self-signed certificate `serve --standalone` makes at start, and the pure parts of the
//! self-managed mode (`serve --tls-secret`): reading certificates back ([`inspect`]), the
//! rotation plan ([`rotation`]) and the controller that keeps the Secret, the serving
//! certificate and the webhook's caBundle current ([`self_managed`]), started by `serve`.
//!
//! Keys are ECDSA P-256: a full TLS handshake with it costs ~295 us of server CPU against
//! ~860 us with RSA-2048, and kube-apiserver's webhook client does not resume sessions.

mod command;
mod generate;
pub mod inspect;
pub mod rotation;
pub mod self_managed;

pub use command::{CertsArgs, CertsError, run, sans, write_certs};
pub use generate::{
    BACKDATE, CertBundle, CertKeyPem, GenerateError, generate_bundle, generate_ca, self_signed,
    service_dns_names, sign_serving,
};
