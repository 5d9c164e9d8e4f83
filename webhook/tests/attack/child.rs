//! The real binary as a child process (so its RSS is its own), for the abuse tests: start it,
//! read its RSS and metrics, connect to it over TLS.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::server_support::{fixture, percentile, write_certs};

/// A `koord-webhook serve --standalone` child process; killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub ca_pem: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port that no other server of this test binary was given. The tests of the binary
/// run at once, and the kernel may hand the same free port to two of them; the second server then
/// failed to bind while its test talked to the first one, until that one went away.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Held by the tests that attack a server with hundreds of connections and hold its answers
/// to a latency bound. Each was a test binary of its own, and binaries run one after another;
/// in one test process two attacks at once would measure each other.
pub async fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    HEAVY.lock().await
}

/// The server under attack: `KOORD_WEBHOOK_BIN` when set (the release binary, whose RSS is
/// the shipped one: `make perf` attacks it), else this build's own.
pub fn server_binary() -> std::path::PathBuf {
    let Some(bin) = std::env::var_os("KOORD_WEBHOOK_BIN") else {
        return env!("CARGO_BIN_EXE_koord-webhook").into();
    };
    let bin = std::path::PathBuf::from(bin);
    assert!(
        bin.is_absolute() && bin.is_file(),
        "KOORD_WEBHOOK_BIN={}: not an absolute path to a file (the tests run in the package's directory)",
        bin.display()
    );
    bin
}

impl Server {
    /// Logging at `error`, to this process's stderr.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_logging("error", None, extra)
    }

    /// Logging at `log_level`, appended to `log` (this process's stderr without one).
    pub fn start_logging(log_level: &str, log: Option<&std::path::Path>, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let bundle = write_certs(dir.path());
        // A port can still be taken between free_port and the child's bind (another test's
        // client connections use ephemeral ports): the child then exits, and it is started
        // again on another port.
        for _ in 0..5 {
            let port = free_port();
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
            let mut child = Command::new(server_binary())
                .args(["serve", "--standalone", "--listen", &addr.to_string()])
                .arg("--tls-cert")
                .arg(dir.path().join("tls.crt"))
                .arg("--tls-key")
                .arg(dir.path().join("tls.key"))
                .args(["--log-level", log_level])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(log.map_or_else(Stdio::inherit, |path| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .expect("log file")
                        .into()
                }))
                .spawn()
                .expect("start koord-webhook");
            let deadline = Instant::now() + Duration::from_secs(20);
            let listening = loop {
                if let Ok(Some(status)) = child.try_wait() {
                    eprintln!("koord-webhook on {addr} exited ({status}); trying another port");
                    break false;
                }
                if std::net::TcpStream::connect(addr).is_ok() {
                    break true;
                }
                assert!(Instant::now() < deadline, "server never listened on {addr}");
                std::thread::sleep(Duration::from_millis(50));
            };
            if listening {
                return Server {
                    child,
                    addr,
                    ca_pem: bundle.ca_cert_pem,
                    _dir: dir,
                };
            }
        }
        panic!("koord-webhook exited on five ports in a row");
    }

    /// (VmRSS, VmHWM) in KiB.
    pub fn rss_kib(&self) -> (u64, u64) {
        rss_of(self.child.id())
    }

    /// A TLS client trusting the server's CA, offering `alpn` (`http/1.1` or `h2`).
    pub fn connector(&self, alpn: &[u8]) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(cert.expect("ca pem")).expect("add root");
        }
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        TlsConnector::from(Arc::new(config))
    }

    pub async fn tls(&self, connector: &TlsConnector) -> std::io::Result<TlsStream<TcpStream>> {
        tls_connect(self.addr, connector).await
    }

    /// As [`Self::tls`], from the local address `from` (127.0.0.2, ...: another client than
    /// one on 127.0.0.1, as a pod is on another address than the apiserver).
    pub async fn tls_from(
        &self,
        connector: &TlsConnector,
        from: std::net::IpAddr,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(from, 0))?;
        let tcp = socket.connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from("localhost").expect("name").to_owned();
        connector.connect(name, tcp).await
    }
}

pub async fn tls_connect(
    addr: SocketAddr,
    connector: &TlsConnector,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from("localhost").expect("name").to_owned();
    connector.connect(name, tcp).await
}

/// The soft limit on open descriptors of this process.
pub fn open_files_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A metric's value from the plain-HTTP `/metrics` listener.
pub fn metric(port: u16, name: &str) -> f64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics listener");
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .expect("get");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("metrics");
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// (VmRSS, VmHWM) of a process, in KiB.
pub fn rss_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The normal client was not shut out: at least `min_answers` answers (sorted latencies) in
/// `seconds`, none slower than the 3 s request deadline a starved admission would run into.
/// Not a latency figure: those come from webhook/benches/abuse.sh on a release build.
pub fn assert_not_starved(sorted: &[Duration], min_answers: u64, seconds: u64) {
    assert!(
        sorted.len() as u64 >= min_answers,
        "the normal client got {} answers in {seconds} s",
        sorted.len()
    );
    let slowest = percentile(sorted, 1.0);
    assert!(
        slowest < Duration::from_secs(3),
        "an admission took {slowest:?}"
    );
}

/// A review padded to exactly `size` bytes with an annotation the engine does not read.
pub fn review_of_size(size: usize) -> Vec<u8> {
    let mut review: serde_json::Value =
        serde_json::from_slice(&fixture("pod-create.json")).expect("fixture");
    review["request"]["object"]["metadata"]["annotations"]["padding"] = "".into();
    let base = serde_json::to_vec(&review).expect("json").len();
    review["request"]["object"]["metadata"]["annotations"]["padding"] =
        "x".repeat(size.saturating_sub(base)).into();
    let body = serde_json::to_vec(&review).expect("json");
    assert_eq!(body.len(), size);
    body
}

/// An environment variable parsed, or the default.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
