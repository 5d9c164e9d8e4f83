//! One NRI connection (IO): the multiplexed Unix socket, a ttrpc server for the `Plugin`
//! service on connection 1 and a ttrpc client for the `Runtime` service on connection 2.
//! Requests are answered concurrently, each by its own task; every frame goes out through one
//! writer task, so frames of different messages never interleave.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use super::mux::{self, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use super::proto::{self, Request, Response, Status};
use super::ttrpc::{self, TYPE_REQUEST, TYPE_RESPONSE};

/// What answers the runtime's calls: `(method, payload, the caller's timeout)` -> the response
/// payload or a status. Implemented by the plugin; a test's fake plugin implements it too.
pub trait Service: Send + Sync + 'static {
    fn call(
        &self,
        service: &str,
        method: &str,
        payload: Vec<u8>,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Vec<u8>, Status>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the NRI connection is closed")]
    Closed,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the runtime answered {code}: {message}")]
    Status { code: i32, message: String },
    #[error("cannot decode the answer: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error(transparent)]
    Message(#[from] ttrpc::MessageError),
}

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Response>>>>;

/// Calls into the runtime (the `Runtime` service) over one connection.
#[derive(Clone)]
pub struct Client {
    out: mpsc::Sender<Vec<u8>>,
    pending: Pending,
    next_stream: Arc<AtomicU32>,
}

impl Client {
    /// One unary call: `service`/`method` with `req`, decoded as `Resp`, within `timeout`.
    pub async fn call<Resp: prost::Message + Default>(
        &self,
        service: &str,
        method: &str,
        req: &impl prost::Message,
        timeout: Duration,
    ) -> Result<Resp, CallError> {
        let stream_id = self.next_stream.fetch_add(2, Ordering::Relaxed);
        let envelope = Request {
            service: service.to_owned(),
            method: method.to_owned(),
            payload: req.encode_to_vec(),
            timeout_nano: i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX),
        };
        let msg = ttrpc::encode(stream_id, TYPE_REQUEST, &envelope.encode_to_vec())?;
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(stream_id, tx);
        let mut framed = Vec::with_capacity(msg.len() + 16);
        mux::encode(RUNTIME_SERVICE_CONN, &msg, &mut framed);
        if self.out.send(framed).await.is_err() {
            lock(&self.pending).remove(&stream_id);
            return Err(CallError::Closed);
        }
        let resp = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => return Err(CallError::Closed),
            Err(_) => {
                lock(&self.pending).remove(&stream_id);
                return Err(CallError::Timeout(timeout));
            }
        };
        match resp.status {
            Some(s) if s.code != proto::code::OK => Err(CallError::Status {
                code: s.code,
                message: s.message,
            }),
            _ => Ok(Resp::decode(resp.payload.as_slice())?),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("closed by the runtime")]
    Eof,
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Frame(#[from] mux::FrameError),
    #[error(transparent)]
    Message(#[from] ttrpc::MessageError),
    #[error("cannot decode a ttrpc envelope: {0}")]
    Envelope(#[from] prost::DecodeError),
}

/// Starts serving `service` on `stream`: returns the client for the runtime's service and the
/// future that runs the connection until it ends (then every pending call fails `Closed`).
pub fn start<S: Service>(
    stream: UnixStream,
    service: Arc<S>,
) -> (Client, impl Future<Output = ConnError> + Send) {
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(64);
    let pending: Pending = Arc::default();
    let client = Client {
        out: out_tx.clone(),
        pending: pending.clone(),
        next_stream: Arc::new(AtomicU32::new(1)),
    };
    let (read, write) = stream.into_split();
    let run = async move {
        let writer = write_frames(write, out_rx);
        let reader = read_frames(read, service, out_tx, pending.clone());
        let why = tokio::select! {
            e = reader => e,
            e = writer => e,
        };
        // Dropping the senders fails every call still waiting.
        lock(&pending).clear();
        why
    };
    (client, run)
}

async fn write_frames(
    mut w: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Vec<u8>>,
) -> ConnError {
    while let Some(frames) = rx.recv().await {
        if let Err(e) = w.write_all(&frames).await {
            return ConnError::Io(e);
        }
    }
    ConnError::Eof
}

async fn read_frames<S: Service>(
    mut r: tokio::net::unix::OwnedReadHalf,
    service: Arc<S>,
    out: mpsc::Sender<Vec<u8>>,
    pending: Pending,
) -> ConnError {
    let mut server = ttrpc::Reader::default();
    let mut client = ttrpc::Reader::default();
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; mux::HEADER_LEN];
        match r.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return ConnError::Eof,
            Err(e) => return e.into(),
        }
        let (conn, len) = match mux::parse_header(header) {
            Ok(h) => h,
            Err(e) => return e.into(),
        };
        payload.resize(len, 0);
        if let Err(e) = r.read_exact(&mut payload).await {
            return e.into();
        }
        let result = match conn {
            PLUGIN_SERVICE_CONN => {
                server.push(&payload);
                serve_requests(&mut server, &service, &out)
            }
            RUNTIME_SERVICE_CONN => {
                client.push(&payload);
                deliver_responses(&mut client, &pending)
            }
            // A connection nobody opened: Go's multiplexer drops such frames too.
            _ => Ok(()),
        };
        if let Err(e) = result {
            return e;
        }
    }
}

fn serve_requests<S: Service>(
    reader: &mut ttrpc::Reader,
    service: &Arc<S>,
    out: &mpsc::Sender<Vec<u8>>,
) -> Result<(), ConnError> {
    while let Some((h, body)) = reader.next_message()? {
        if h.kind != TYPE_REQUEST {
            continue; // streaming data: no NRI call uses streams
        }
        let req = Request::decode(body.as_slice())?;
        let service = service.clone();
        let out = out.clone();
        tokio::spawn(async move {
            let timeout = u64::try_from(req.timeout_nano)
                .ok()
                .filter(|n| *n > 0)
                .map(Duration::from_nanos);
            let resp = match service
                .call(&req.service, &req.method, req.payload, timeout)
                .await
            {
                Ok(payload) => Response {
                    status: None,
                    payload,
                },
                Err(status) => Response {
                    status: Some(status),
                    payload: Vec::new(),
                },
            };
            let Ok(msg) = ttrpc::encode(h.stream_id, TYPE_RESPONSE, &resp.encode_to_vec()) else {
                tracing::warn!(method = %req.method, "NRI answer above ttrpc's size limit; not sent");
                return;
            };
            let mut framed = Vec::with_capacity(msg.len() + 16);
            mux::encode(PLUGIN_SERVICE_CONN, &msg, &mut framed);
            // A closed connection: the runtime no longer waits for this answer.
            let _ = out.send(framed).await;
        });
    }
    Ok(())
}

fn deliver_responses(reader: &mut ttrpc::Reader, pending: &Pending) -> Result<(), ConnError> {
    while let Some((h, body)) = reader.next_message()? {
        if h.kind != TYPE_RESPONSE {
            continue;
        }
        let resp = Response::decode(body.as_slice())?;
        if let Some(tx) = lock(pending).remove(&h.stream_id) {
            let _ = tx.send(resp);
        }
    }
    Ok(())
}

/// The status a plugin answers a method it does not implement with (the runtime then falls
/// back where it can, e.g. to `StateChange`).
pub fn unimplemented(service: &str, method: &str) -> Status {
    Status {
        code: proto::code::UNIMPLEMENTED,
        message: format!("{service}/{method} is not implemented by this plugin"),
    }
}
