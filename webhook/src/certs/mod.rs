//! Serving certificates: `koord-webhook certs` (a CA plus a serving cert for the Service) and
//! the self-signed certificate `serve --standalone` makes at start.
//!
//! Keys are ECDSA P-256: a full TLS handshake with it costs ~295 us of server CPU against
//! ~860 us with RSA-2048, and kube-apiserver's webhook client does not resume sessions.

mod command;
mod generate;

pub use command::{CertsArgs, CertsError, run, write_certs};
pub use generate::{
    CertBundle, CertKeyPem, GenerateError, generate_bundle, self_signed, service_dns_names,
};
