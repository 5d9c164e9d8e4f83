//! The D-Bus wire format, as much of it as `SetUnitProperties` on systemd's private socket
//! needs: the `EXTERNAL` authentication lines, a method call with the body `(sba(sv))` of `t`
//! values, and the messages systemd sends back (the reply, an error, and the signals it sends
//! every connection of its private socket, which are read and dropped). Pure.
//!
//! Why not a D-Bus crate: on the private socket systemd's replies carry the sender
//! `org.freedesktop.systemd1`, which is no unique name; zbus 6.2 refuses such a message and
//! closes the connection (seen against systemd 252: the call applied, the reply failed with
//! "Invalid unique name"). docs/decisions.md, "Our own D-Bus codec for systemd's private
//! socket".

/// Message types.
pub const METHOD_CALL: u8 = 1;
pub const METHOD_RETURN: u8 = 2;
pub const ERROR: u8 = 3;
pub const SIGNAL: u8 = 4;

const FIELD_PATH: u8 = 1;
const FIELD_INTERFACE: u8 = 2;
const FIELD_MEMBER: u8 = 3;
const FIELD_ERROR_NAME: u8 = 4;
const FIELD_REPLY_SERIAL: u8 = 5;
const FIELD_DESTINATION: u8 = 6;
const FIELD_SENDER: u8 = 7;
const FIELD_SIGNATURE: u8 = 8;

/// The largest message accepted. The specification allows 128 MiB; systemd's messages on this
/// socket (replies, unit signals) are a few KiB.
pub const MAX_MESSAGE: usize = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("D-Bus message malformed: {0}")]
    Malformed(&'static str),
    #[error("D-Bus message of {0} bytes, more than the {MAX_MESSAGE} accepted")]
    TooLarge(usize),
}

fn malformed<T>(why: &'static str) -> Result<T, WireError> {
    Err(WireError::Malformed(why))
}

/// The client's authentication: `EXTERNAL` with the uid as hex of its decimal digits, then
/// `BEGIN` once the server said `OK` (no file descriptors are passed).
pub fn auth_external(uid: u32) -> Vec<u8> {
    let hex: String = uid
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\0AUTH EXTERNAL {hex}\r\n").into_bytes()
}

pub const AUTH_BEGIN: &[u8] = b"BEGIN\r\n";

/// Whether the server's answer line (without `\r\n`) accepts the authentication.
pub fn auth_ok(line: &str) -> bool {
    line.starts_with("OK ")
}

/// Little-endian writer with alignment relative to its start (a header starts the message,
/// a body starts 8-aligned after it, so both align as the whole message does).
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }
    fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.pad(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.pad(8);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn string(&mut self, s: &str) {
        self.u32(u32::try_from(s.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    fn signature(&mut self, s: &str) {
        self.u8(u8::try_from(s.len()).unwrap_or(u8::MAX));
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }
    /// An array: its length placeholder, the padding to the elements' alignment, the
    /// elements, then the length (which counts neither).
    fn array(&mut self, elem_align: usize, elements: impl FnOnce(&mut Self)) {
        self.pad(4);
        let at = self.buf.len();
        self.u32(0);
        self.pad(elem_align);
        let start = self.buf.len();
        elements(self);
        let len = u32::try_from(self.buf.len() - start).unwrap_or(u32::MAX);
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
}

enum FieldValue<'a> {
    Str(&'a str),
    Path(&'a str),
    Sig(&'a str),
    U32(u32),
}

fn message(kind: u8, serial: u32, fields: &[(u8, FieldValue<'_>)], body: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(b'l');
    w.u8(kind);
    w.u8(0);
    w.u8(1);
    w.u32(u32::try_from(body.len()).unwrap_or(u32::MAX));
    w.u32(serial);
    w.array(8, |w| {
        for (code, value) in fields {
            w.pad(8);
            w.u8(*code);
            match value {
                FieldValue::Str(s) => {
                    w.signature("s");
                    w.string(s);
                }
                FieldValue::Path(s) => {
                    w.signature("o");
                    w.string(s);
                }
                FieldValue::Sig(s) => {
                    w.signature("g");
                    w.signature(s);
                }
                FieldValue::U32(v) => {
                    w.signature("u");
                    w.u32(*v);
                }
            }
        }
    });
    w.pad(8);
    w.buf.extend_from_slice(body);
    w.buf
}

/// `org.freedesktop.systemd1.Manager.SetUnitProperties(unit, runtime, properties)` with every
/// property a `t`.
pub fn set_unit_properties(
    serial: u32,
    unit: &str,
    runtime: bool,
    props: &[(&str, u64)],
) -> Vec<u8> {
    let mut b = Writer::default();
    b.string(unit);
    b.u32(u32::from(runtime));
    b.array(8, |b| {
        for (name, value) in props {
            b.pad(8);
            b.string(name);
            b.signature("t");
            b.u64(*value);
        }
    });
    message(
        METHOD_CALL,
        serial,
        &[
            (FIELD_PATH, FieldValue::Path("/org/freedesktop/systemd1")),
            (
                FIELD_DESTINATION,
                FieldValue::Str("org.freedesktop.systemd1"),
            ),
            (
                FIELD_INTERFACE,
                FieldValue::Str("org.freedesktop.systemd1.Manager"),
            ),
            (FIELD_MEMBER, FieldValue::Str("SetUnitProperties")),
            (FIELD_SIGNATURE, FieldValue::Sig("sba(sv)")),
        ],
        &b.buf,
    )
}

/// A reply as systemd sends it on its private socket (the sender is its well-known name): a
/// method return, or with `error` (name, message) an error. For the tests' fake manager.
pub fn reply(serial: u32, reply_serial: u32, error: Option<(&str, &str)>) -> Vec<u8> {
    let sender = (FIELD_SENDER, FieldValue::Str("org.freedesktop.systemd1"));
    match error {
        None => message(
            METHOD_RETURN,
            serial,
            &[(FIELD_REPLY_SERIAL, FieldValue::U32(reply_serial)), sender],
            &[],
        ),
        Some((name, text)) => {
            let mut b = Writer::default();
            b.string(text);
            message(
                ERROR,
                serial,
                &[
                    (FIELD_ERROR_NAME, FieldValue::Str(name)),
                    (FIELD_REPLY_SERIAL, FieldValue::U32(reply_serial)),
                    sender,
                    (FIELD_SIGNATURE, FieldValue::Sig("s")),
                ],
                &b.buf,
            )
        }
    }
}

/// A signal with no body (the tests' fake manager sends them between replies, as systemd
/// does).
pub fn signal(serial: u32, member: &str) -> Vec<u8> {
    message(
        SIGNAL,
        serial,
        &[
            (FIELD_PATH, FieldValue::Path("/org/freedesktop/systemd1")),
            (
                FIELD_INTERFACE,
                FieldValue::Str("org.freedesktop.systemd1.Manager"),
            ),
            (FIELD_MEMBER, FieldValue::Str(member)),
        ],
        &[],
    )
}

/// Reader of one message, in its own byte order.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl<'a> Reader<'a> {
    fn align(&mut self, n: usize) -> Result<(), WireError> {
        let to = self.pos.div_ceil(n) * n;
        if to > self.buf.len() {
            return malformed("truncated");
        }
        self.pos = to;
        Ok(())
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let Some(end) = end else {
            return malformed("truncated");
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        self.align(4)?;
        let b: [u8; 4] = self
            .take(4)?
            .try_into()
            .map_err(|_| WireError::Malformed("u32"))?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        self.align(8)?;
        let b: [u8; 8] = self
            .take(8)?
            .try_into()
            .map_err(|_| WireError::Malformed("u64"))?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }
    fn text(&mut self, len: usize) -> Result<String, WireError> {
        let bytes = self.take(len)?;
        if self.take(1)? != [0] {
            return malformed("string without its nul");
        }
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::Malformed("string not UTF-8"))
    }
    fn string(&mut self) -> Result<String, WireError> {
        let len = self.u32()? as usize;
        self.text(len)
    }
    fn signature(&mut self) -> Result<String, WireError> {
        let len = self.u8()? as usize;
        self.text(len)
    }
}

/// The byte order mark of a message.
fn big_endian(b: u8) -> Result<bool, WireError> {
    match b {
        b'l' => Ok(false),
        b'B' => Ok(true),
        _ => malformed("byte order"),
    }
}

/// The length of the message at the start of `buf`, once its fixed header is in (`None`: not
/// yet).
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    if buf.len() < 16 {
        return Ok(None);
    }
    let mut r = Reader {
        buf,
        pos: 4,
        big: big_endian(buf[0])?,
    };
    let body = r.u32()? as usize;
    r.pos = 12;
    let fields = r.u32()? as usize;
    let total = (16usize.saturating_add(fields))
        .div_ceil(8)
        .saturating_mul(8)
        .saturating_add(body);
    if total > MAX_MESSAGE {
        return Err(WireError::TooLarge(total));
    }
    Ok(Some(total))
}

/// What the client needs of a message (and the fake manager of a call).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Incoming {
    pub kind: u8,
    pub serial: u32,
    pub reply_serial: Option<u32>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    /// An error's message (its body's first string).
    pub error_message: Option<String>,
    pub signature: String,
    big: bool,
    body: Vec<u8>,
}

/// Decodes one whole message (`frame_len` bytes).
pub fn decode(msg: &[u8]) -> Result<Incoming, WireError> {
    let Some(total) = frame_len(msg)? else {
        return malformed("shorter than its header");
    };
    if msg.len() != total {
        return malformed("length");
    }
    let big = big_endian(msg[0])?;
    let mut r = Reader {
        buf: msg,
        pos: 1,
        big,
    };
    let kind = r.u8()?;
    let _flags = r.u8()?;
    if r.u8()? != 1 {
        return malformed("protocol version");
    }
    let body_len = r.u32()? as usize;
    let serial = r.u32()?;
    let fields_len = r.u32()? as usize;
    let fields_end = 16 + fields_len;
    let mut m = Incoming {
        kind,
        serial,
        big,
        ..Incoming::default()
    };
    while r.pos < fields_end {
        r.align(8)?;
        let code = r.u8()?;
        let sig = r.signature()?;
        match sig.as_str() {
            "s" | "o" => {
                let v = r.string()?;
                match code {
                    FIELD_MEMBER => m.member = Some(v),
                    FIELD_ERROR_NAME => m.error_name = Some(v),
                    // The sender (systemd's well-known name here), the path, ...: not needed.
                    _ => {}
                }
            }
            "g" => {
                let v = r.signature()?;
                if code == FIELD_SIGNATURE {
                    m.signature = v;
                }
            }
            "u" => {
                let v = r.u32()?;
                if code == FIELD_REPLY_SERIAL {
                    m.reply_serial = Some(v);
                }
            }
            "y" => {
                r.u8()?;
            }
            _ => return malformed("header field of an unexpected type"),
        }
    }
    if r.pos != fields_end {
        return malformed("header fields overrun");
    }
    r.align(8)?;
    let body = r.take(body_len)?;
    m.body = body.to_vec();
    if kind == ERROR && m.signature.starts_with('s') {
        let mut b = Reader {
            buf: body,
            pos: 0,
            big,
        };
        m.error_message = b.string().ok();
    }
    Ok(m)
}

/// A property as a call carried it: name, variant signature, value (`t` only).
pub type CallProperty = (String, String, u64);

/// The arguments of a `SetUnitProperties` call (the tests' fake manager reads them).
pub fn set_unit_properties_args(
    m: &Incoming,
) -> Result<(String, bool, Vec<CallProperty>), WireError> {
    if m.signature != "sba(sv)" {
        return malformed("not (sba(sv))");
    }
    let mut r = Reader {
        buf: &m.body,
        pos: 0,
        big: m.big,
    };
    let unit = r.string()?;
    let runtime = r.u32()? != 0;
    let len = r.u32()? as usize;
    r.align(8)?;
    let end = r.pos + len;
    let mut props = Vec::new();
    while r.pos < end {
        r.align(8)?;
        let name = r.string()?;
        let sig = r.signature()?;
        if sig != "t" {
            return malformed("a property that is not a t");
        }
        props.push((name, sig, r.u64()?));
    }
    Ok((unit, runtime, props))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_lines() {
        assert_eq!(auth_external(0), b"\0AUTH EXTERNAL 30\r\n");
        assert_eq!(auth_external(1000), b"\0AUTH EXTERNAL 31303030\r\n");
        assert!(auth_ok("OK 1234deadbeef"));
        assert!(!auth_ok("REJECTED EXTERNAL"));
    }

    /// The call's bytes, field by field (little endian, alignment from the message start).
    #[test]
    fn a_call_as_bytes() {
        let m = set_unit_properties(7, "a.slice", true, &[("MemoryMin", 4096)]);
        assert_eq!(&m[..4], b"l\x01\x00\x01");
        assert_eq!(u32::from_le_bytes(m[8..12].try_into().expect("4")), 7);
        let body_len = u32::from_le_bytes(m[4..8].try_into().expect("4")) as usize;
        let body = &m[m.len() - body_len..];
        let mut want = Vec::new();
        want.extend_from_slice(&7u32.to_le_bytes());
        want.extend_from_slice(b"a.slice\0");
        want.extend_from_slice(&1u32.to_le_bytes()); // runtime = true, at 12
        want.extend_from_slice(&32u32.to_le_bytes()); // the array's length, at 16
        want.extend_from_slice(&[0; 4]); // to the struct's 8-alignment, 24
        want.extend_from_slice(&9u32.to_le_bytes());
        want.extend_from_slice(b"MemoryMin\0"); // to 38
        want.extend_from_slice(b"\x01t\0"); // the variant's signature, to 41
        want.extend_from_slice(&[0; 7]); // to 48
        want.extend_from_slice(&4096u64.to_le_bytes()); // to 56 = 24 + 32
        assert_eq!(body, want.as_slice());
        assert_eq!(m.len() % 8, 0);
    }

    #[test]
    fn calls_and_replies_round_trip() {
        let props = [("MemoryLow", 0), ("MemoryMin", u64::MAX), ("CPUWeight", 39)];
        let call = set_unit_properties(3, "cri-containerd-ab.scope", true, &props);
        assert_eq!(frame_len(&call), Ok(Some(call.len())));
        assert_eq!(frame_len(&call[..15]), Ok(None));
        let m = decode(&call).expect("call");
        assert_eq!(
            (m.kind, m.serial, m.member.as_deref()),
            (METHOD_CALL, 3, Some("SetUnitProperties"))
        );
        let (unit, runtime, got) = set_unit_properties_args(&m).expect("args");
        assert_eq!((unit.as_str(), runtime), ("cri-containerd-ab.scope", true));
        let want: Vec<CallProperty> = props
            .iter()
            .map(|(n, v)| ((*n).to_owned(), "t".to_owned(), *v))
            .collect();
        assert_eq!(got, want);

        let ok = decode(&reply(9, 3, None)).expect("return");
        assert_eq!(
            (ok.kind, ok.reply_serial, ok.error_name),
            (METHOD_RETURN, Some(3), None)
        );
        let err = decode(&reply(
            10,
            4,
            Some((
                "org.freedesktop.DBus.Error.PropertyReadOnly",
                "Cannot set property CPUQuotaPeriodUSec, or unknown property.",
            )),
        ))
        .expect("error");
        assert_eq!(err.kind, ERROR);
        assert_eq!(err.reply_serial, Some(4));
        assert_eq!(
            err.error_name.as_deref(),
            Some("org.freedesktop.DBus.Error.PropertyReadOnly")
        );
        assert_eq!(
            err.error_message.as_deref(),
            Some("Cannot set property CPUQuotaPeriodUSec, or unknown property.")
        );
        let sig = decode(&signal(11, "UnitNew")).expect("signal");
        assert_eq!((sig.kind, sig.member.as_deref()), (SIGNAL, Some("UnitNew")));
    }

    /// A big-endian reply (a peer on another byte order may send one).
    #[test]
    fn big_endian_messages() {
        let mut m = reply(1, 2, None);
        // Re-encode the fixed header and the u32 fields big-endian by hand.
        m[0] = b'B';
        for range in [4..8, 8..12, 12..16] {
            m[range.clone()].reverse();
        }
        // The reply serial's value: the field's u32 after code 5, signature "u".
        let at = m
            .windows(4)
            .position(|w| w == [FIELD_REPLY_SERIAL, 1, b'u', 0])
            .expect("field")
            + 4;
        m[at..at + 4].reverse();
        // The sender string's length.
        let s = m
            .windows(4)
            .position(|w| w == [FIELD_SENDER, 1, b's', 0])
            .expect("field")
            + 4;
        m[s..s + 4].reverse();
        let r = decode(&m).expect("big endian");
        assert_eq!(
            (r.kind, r.serial, r.reply_serial),
            (METHOD_RETURN, 1, Some(2))
        );
    }

    #[test]
    fn refuses_what_is_not_a_message() {
        let good = reply(1, 2, None);
        let mut bad_order = good.clone();
        bad_order[0] = b'x';
        assert!(frame_len(&bad_order).is_err());
        let mut huge = good.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(frame_len(&huge), Err(WireError::TooLarge(_))));
        let mut version = good.clone();
        version[3] = 2;
        assert!(decode(&version).is_err());
        assert!(decode(&good[..good.len() - 1]).is_err());
        let mut overrun = good.clone();
        overrun[12..16].copy_from_slice(&200u32.to_le_bytes());
        assert!(decode(&overrun).is_err());
    }
}
