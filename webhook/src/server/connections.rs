//! What a connection may hold and for how long, below TLS: a cap on open connections and an
//! idle timeout (nothing written for that long closes it, for HTTP/1.1 and HTTP/2 alike: an
//! idle connection, and one that keeps sending without ever getting an answer, such as a
//! request head dripped a byte at a time).
//!
//! At the cap, who gives up a slot is decided by the connection guard both binaries share
//! (`koord_runtime::connections`): a newcomer from another address takes the slot of the
//! oldest connection not yet answered once from the source holding the most of those; a
//! newcomer at its own address's share (or from the heaviest address) takes its own address's
//! least valuable connection, an unfinished one before an idle kept-alive one, and one whose
//! request has stalled for a second last; a connection making progress on a request keeps its
//! slot, and one source holds at most `--max-connections-per-source`. A newcomer with nothing to take is closed at once, before
//! its TLS handshake costs anything.
//!
//! Together with the TLS handshake timeout, the first-request timeout and the body limit
//! (`server/mod.rs`, `server/handler.rs`) this is what keeps a client that opens thousands of
//! idle or half-sent connections from starving admissions (docs/admission-server.md, "Abuse").

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum_server::accept::Accept;
use koord_runtime::connections::{Guard, Held, Limits, Refused, Slot};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use crate::metrics::Metrics;
use crate::server::body_budget::BodyBudget;

/// Limits of a connection, as configured.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections one source address may hold at once.
    pub max_connections_per_source: usize,
    /// A connection the server has written nothing to for this long is closed.
    pub idle_timeout: Duration,
}

/// How long a newcomer waits for an evicted connection's slot before it is shed itself.
const SLOT_WAIT: Duration = Duration::from_secs(1);

/// A connection with a request in flight and none started or answered for this long is
/// stalled: a body that never comes (the apiserver sends its bodies with their heads, and a
/// review takes well under a millisecond). Such a connection gives its slot to a newcomer
/// of its own address when nothing else can.
const STALLED_AFTER: Duration = Duration::from_secs(1);

/// The acceptor under TLS: takes a slot (at the cap, by closing a connection the guard
/// picks, else the newcomer is shed), sets TCP_NODELAY, wraps the stream in the idle timer
/// and the service in [`Answered`], which tells the guard when a request is in flight.
#[derive(Clone)]
pub struct GuardedAcceptor {
    guard: Guard,
    idle_timeout: Duration,
    /// Each connection's budget of gathered body bytes ([`BodyBudget`]).
    body_budget_bytes: usize,
    metrics: Metrics,
}

impl GuardedAcceptor {
    pub fn new(limits: ConnectionLimits, body_budget_bytes: usize, metrics: Metrics) -> Self {
        GuardedAcceptor {
            guard: Guard::new(Limits {
                max: limits.max_connections,
                per_source: limits.max_connections_per_source,
                slot_wait: SLOT_WAIT,
                stalled_after: STALLED_AFTER,
            }),
            idle_timeout: limits.idle_timeout,
            body_budget_bytes,
            metrics,
        }
    }
}

fn shed() -> io::Error {
    io::Error::other("connection limit reached")
}

impl<S: Send + 'static> Accept<TcpStream, S> for GuardedAcceptor {
    type Stream = GuardedStream;
    type Service = Answered<S>;
    type Future = Pin<Box<dyn Future<Output = io::Result<(GuardedStream, Answered<S>)>> + Send>>;

    fn accept(&self, stream: TcpStream, service: S) -> Self::Future {
        let (guard, idle_timeout, metrics) =
            (self.guard.clone(), self.idle_timeout, self.metrics.clone());
        let body_budget_bytes = self.body_budget_bytes;
        Box::pin(async move {
            let source: IpAddr = stream.peer_addr()?.ip();
            let held = match guard.admit(source).await {
                Ok(admitted) => {
                    if admitted.evicted_another {
                        metrics.connections_evicted.inc();
                    }
                    admitted.held
                }
                Err(why) => {
                    // Dropping the stream closes it; the connections already open keep
                    // being served.
                    if why == Refused::SlotNotFreed {
                        metrics.connections_evicted.inc();
                    }
                    metrics.connections_shed.inc();
                    return Err(shed());
                }
            };
            // Nagle + delayed ACK would add 40 ms to small HTTP/2 frames.
            stream.set_nodelay(true)?;
            metrics.connections_open.inc();
            let service = Answered {
                inner: service,
                slot: held.slot().clone(),
                budget: BodyBudget::new(body_budget_bytes),
            };
            let stream = GuardedStream {
                inner: stream,
                source: source.to_canonical(),
                idle_timeout,
                wrote: false,
                quiet_checks: 0,
                timer: Box::pin(tokio::time::sleep(idle_timeout / IDLE_CHECKS)),
                held,
                metrics,
            };
            Ok((stream, service))
        })
    }
}

/// The connection's service: tells the guard that a request is in flight from its call until
/// its answer (a connection making progress on a request is never evicted; one answered before
/// and idle now may be, by a newcomer of its own address, and one whose request has stalled
/// for [`STALLED_AFTER`] as a last resort). Two atomic adds and at most two clock reads per
/// request, no allocation. Each request carries the connection's [`BodyBudget`] in its
/// extensions.
#[derive(Clone)]
pub struct Answered<S> {
    inner: S,
    slot: Arc<Slot>,
    budget: BodyBudget,
}

impl<S, B> tower_service::Service<http::Request<B>> for Answered<S>
where
    S: tower_service::Service<http::Request<B>>,
    S::Future: Unpin,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = InFlight<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.budget.clone());
        self.slot.request_started();
        InFlight {
            answer: self.inner.call(request),
            slot: Some(self.slot.clone()),
        }
    }
}

/// A request's answer being made; the request counts as in flight until it is ready (or
/// dropped, when the connection goes first).
pub struct InFlight<F> {
    answer: F,
    slot: Option<Arc<Slot>>,
}

impl<F, T, E> Future for InFlight<F>
where
    F: Future<Output = Result<T, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let answer = ready!(Pin::new(&mut this.answer).poll(cx));
        if let Some(slot) = this.slot.take() {
            slot.request_finished(answer.is_ok());
        }
        Poll::Ready(answer)
    }
}

impl<F> Drop for InFlight<F> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.request_finished(false);
        }
    }
}

/// Idle checks per idle timeout: a connection is closed once this many checks in a row saw
/// nothing written, between the timeout and 1.25 times it after its last write.
const IDLE_CHECKS: u32 = 4;

/// A TCP stream that holds a connection slot, fails with `TimedOut` once nothing has been
/// written to it for the idle timeout (up to a quarter more), and with `ConnectionAborted`
/// once evicted. Only writes count: every request that is served gets an answer, so a
/// connection that reads without ever being answered (a head or frames dripped to hold it
/// open) is as idle as a silent one. A write only sets a flag: no clock read and no
/// timer-wheel update per record; the timer fires every quarter of the timeout and counts the
/// quiet quarters.
pub struct GuardedStream {
    inner: TcpStream,
    /// The peer's address (an IPv4-mapped one as IPv4).
    source: IpAddr,
    idle_timeout: Duration,
    /// A write completed since the last idle check.
    wrote: bool,
    /// Idle checks in a row that saw nothing written.
    quiet_checks: u32,
    timer: Pin<Box<Sleep>>,
    /// The slot, given back on drop.
    held: Held,
    metrics: Metrics,
}

impl Drop for GuardedStream {
    fn drop(&mut self) {
        self.metrics.connections_open.dec();
    }
}

/// What the TLS acceptor needs of the connection below it: the address whose turn its
/// handshake takes, and its slot (a connection evicted while it waits gives up its turn).
pub trait Guarded {
    fn source(&self) -> IpAddr;
    fn slot(&self) -> &Arc<Slot>;
}

impl Guarded for GuardedStream {
    fn source(&self) -> IpAddr {
        self.source
    }

    fn slot(&self) -> &Arc<Slot> {
        self.held.slot()
    }
}

impl GuardedStream {
    /// `Ready(err)` when the connection has been idle for the timeout or was evicted;
    /// registers the timer and the eviction waker otherwise.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.held.slot().poll_evicted(cx).is_ready() {
            return Poll::Ready(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed for a new connection at the connection limit",
            ));
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if std::mem::take(&mut self.wrote) {
                self.quiet_checks = 0;
            } else {
                self.quiet_checks += 1;
            }
            if self.quiet_checks >= IDLE_CHECKS {
                self.metrics.connections_idle_closed.inc();
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "nothing written to the connection for longer than the idle timeout",
                ));
            }
            let next = Instant::now() + self.idle_timeout / IDLE_CHECKS;
            self.timer.as_mut().reset(next);
        }
    }

    fn note_write<T>(&mut self, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.wrote = true;
        }
        poll
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => this.poll_idle(cx).map(Err),
            ready => ready,
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Pending => this.poll_idle(cx).map(Err),
            ready => this.note_write(ready),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.poll_idle(cx).map(Err),
            ready => this.note_write(ready),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// What the first-bytes acceptor needs of the connection below it.
pub trait AcceptedConnection {
    /// The connection negotiated HTTP/2 in ALPN (and holds one of `--max-h2-connections`).
    fn negotiated_h2(&self) -> bool;
}

/// The HTTP/2 client preface's first line; no HTTP/1.1 request starts with it.
const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// Whether `first` (a connection's first bytes) is, or may still become, the HTTP/2 preface.
#[derive(Debug, PartialEq, Eq)]
enum Preface {
    Not,
    Partial,
    Whole,
}

fn h2_preface(first: &[u8]) -> Preface {
    let n = first.len().min(H2_PREFACE_LINE.len());
    if first.is_empty() || first[..n] != H2_PREFACE_LINE[..n] {
        Preface::Not
    } else if n == H2_PREFACE_LINE.len() {
        Preface::Whole
    } else {
        Preface::Partial
    }
}

/// The acceptor over TLS: after the handshake, waits (at most the header-read timeout) for the
/// first request's head before the connection gets its HTTP state: the whole head on HTTP/1.1,
/// the first bytes on HTTP/2. Until then a connection costs its TLS state and the bytes it
/// sent, and nothing else: hyper allocates its read and write buffers (8 KiB each, the read
/// one grown to 16 KiB by a head arriving a byte at a time) as soon as it has the connection,
/// and a head kept half-sent held them all until the timeout (~50 KiB a connection against
/// ~18 KiB for a silent one; the cap full of such heads took the process past 64 MiB).
///
/// It also closes a connection that did not negotiate `h2` and starts with the HTTP/2 preface
/// anyway: the server detects the protocol from these bytes, so without this a client that
/// ignores ALPN would get HTTP/2 past `--max-h2-connections` (RFC 9113 3.2: HTTP/2 over TLS is
/// chosen by ALPN).
#[derive(Clone)]
pub struct FirstBytesAcceptor<A> {
    inner: A,
    timeout: Duration,
    max_head: usize,
}

impl<A> FirstBytesAcceptor<A> {
    /// `max_head`: past this many bytes without the end of the head, the connection is handed
    /// over as it is (hyper then refuses the head for its size).
    pub fn new(inner: A, timeout: Duration, max_head: usize) -> Self {
        FirstBytesAcceptor {
            inner,
            timeout,
            max_head,
        }
    }
}

/// Read ahead at a time while the first head arrives: the head grows its buffer in steps of
/// this (the rest of a larger TLS record stays in the TLS layer's buffer for hyper to read).
const FIRST_READ: usize = 256;

/// Whether `head` holds the end of an HTTP/1.1 head: an empty line after a request line
/// (httparse takes a bare LF as a line end too, and skips empty lines before the request
/// line, so those do not end anything), looking only at what `before` did not rule out.
fn head_complete(head: &[u8], before: usize) -> bool {
    let Some(start) = head.iter().position(|b| !matches!(b, b'\r' | b'\n')) else {
        return false;
    };
    let from = before.saturating_sub(3).max(start);
    head[from..].windows(2).enumerate().any(|(i, w)| {
        let at = from + i;
        w == b"\n\n" || (w == b"\r\n" && at > start && head[at - 1] == b'\n')
    })
}

impl<A, I, S> Accept<I, S> for FirstBytesAcceptor<A>
where
    A: Accept<I, S>,
    A::Future: Send + 'static,
    A::Stream: AsyncRead + AcceptedConnection + Unpin + Send + 'static,
    A::Service: Send + 'static,
{
    type Stream = Prefixed<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = self.inner.accept(stream, service);
        let (timeout, max_head) = (self.timeout, self.max_head);
        Box::pin(async move {
            let (mut stream, service) = accepted.await?;
            let h2 = stream.negotiated_h2();
            let read_first = async {
                let mut head = Vec::new();
                loop {
                    head.reserve(FIRST_READ);
                    let before = head.len();
                    if stream.read_buf(&mut head).await? == 0 {
                        break;
                    }
                    // HTTP/2: its frames are hyper's to read from the first byte.
                    if h2 {
                        break;
                    }
                    // Until the bytes so far rule the preface out (the first byte, for any
                    // HTTP/1.1 request), read on: a client may send it a few bytes at a time.
                    match h2_preface(&head) {
                        Preface::Partial => continue,
                        Preface::Whole => {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "HTTP/2 preface on a connection that did not negotiate h2 in ALPN",
                            ));
                        }
                        Preface::Not => {}
                    }
                    if head_complete(&head, before) || head.len() >= max_head {
                        break;
                    }
                }
                io::Result::Ok(head)
            };
            let head = tokio::time::timeout(timeout, read_first)
                .await
                .map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no request head before the header-read timeout",
                    )
                })??;
            let stream = Prefixed {
                prefix: head,
                at: 0,
                inner: stream,
            };
            Ok((stream, service))
        })
    }
}

/// A stream that first yields the bytes already read from it.
pub struct Prefixed<T> {
    prefix: Vec<u8>,
    at: usize,
    inner: T,
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let rest = &this.prefix[this.at..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_head_is_found_wherever_the_reads_split_it() {
        let head = b"POST /mutate-pod HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";
        let end = head.len() - 2;
        // Read in pieces of every size: complete exactly once the empty line is in.
        for step in 1..=head.len() {
            let mut before = 0;
            let mut done_at = None;
            while before < head.len() {
                let now = (before + step).min(head.len());
                if done_at.is_none() && head_complete(&head[..now], before) {
                    done_at = Some(now);
                }
                before = now;
            }
            let done_at = done_at.expect("found");
            assert!(
                done_at >= end && done_at < end + step,
                "step {step}: {done_at}"
            );
        }
        assert!(head_complete(b"GET / HTTP/1.1\nhost: x\n\n", 0), "bare LF");
        assert!(!head_complete(b"GET / HTTP/1.1\r\nhost: x\r\n", 0));
        assert!(
            !head_complete(b"\r\n\r\n", 0),
            "empty lines before a request line"
        );
        assert!(head_complete(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n", 0));
    }

    #[test]
    fn the_http2_preface_and_nothing_else_is_recognised() {
        let table: &[(&[u8], Preface)] = &[
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Preface::Whole),
            (b"PRI * HTTP/2.0\r\n", Preface::Whole),
            (b"PRI * HT", Preface::Partial),
            (b"P", Preface::Partial),
            (b"", Preface::Not),
            (b"POST /mutate-pod HTTP/1.1\r\n", Preface::Not),
            (b"PRINT", Preface::Not),
        ];
        for (first, want) in table {
            assert_eq!(
                h2_preface(first),
                *want,
                "{:?}",
                String::from_utf8_lossy(first)
            );
        }
    }
}
