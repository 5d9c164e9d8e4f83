//! ttrpc's message framing (`github.com/containerd/ttrpc`, `channel.go`): each message is a
//! 10-byte header `[length: u32 BE][stream id: u32 BE][type: u8][flags: u8]` and `length` bytes
//! of protobuf. A unary call is one request (type 1) and one response (type 2) on the same
//! stream id; a client numbers its streams 1, 3, 5, … Pure: [`encode`] and the [`Reader`] that
//! cuts one connection's byte stream (as the multiplexer delivers it) into messages.

pub const HEADER_LEN: usize = 10;
/// ttrpc's limit on one message.
pub const MAX_MESSAGE: usize = 4 << 20;

pub const TYPE_REQUEST: u8 = 1;
pub const TYPE_RESPONSE: u8 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub stream_id: u32,
    pub kind: u8,
    pub flags: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("ttrpc message of {0} bytes is above the limit of {MAX_MESSAGE}")]
    TooLarge(usize),
}

/// One message: header and payload.
pub fn encode(stream_id: u32, kind: u8, payload: &[u8]) -> Result<Vec<u8>, MessageError> {
    if payload.len() > MAX_MESSAGE {
        return Err(MessageError::TooLarge(payload.len()));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    // At most MAX_MESSAGE, checked above.
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.push(kind);
    out.push(0);
    out.extend_from_slice(payload);
    Ok(out)
}

/// Reassembles messages from one connection's byte stream, whatever the frame boundaries.
#[derive(Debug, Default)]
pub struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, if the bytes so far hold one.
    pub fn next_message(&mut self) -> Result<Option<(Header, Vec<u8>)>, MessageError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let b = &self.buf;
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len > MAX_MESSAGE {
            return Err(MessageError::TooLarge(len));
        }
        if b.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let header = Header {
            stream_id: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            kind: b[8],
            flags: b[9],
        };
        let payload = b[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        Ok(Some((header, payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let m = encode(3, TYPE_REQUEST, b"xyz").expect("small");
        assert_eq!(m, [0, 0, 0, 3, 0, 0, 0, 3, 1, 0, b'x', b'y', b'z']);
        assert_eq!(
            encode(1, TYPE_RESPONSE, &vec![0; MAX_MESSAGE + 1]),
            Err(MessageError::TooLarge(MAX_MESSAGE + 1))
        );
    }

    #[test]
    fn reassembles_across_any_split() {
        let a = encode(1, TYPE_REQUEST, b"first").expect("a");
        let b = encode(3, TYPE_RESPONSE, &[7u8; 5000]).expect("b");
        let stream: Vec<u8> = a.iter().chain(&b).copied().collect();
        // Every split point, and byte by byte.
        for cut in [1, 5, 9, 10, 11, a.len(), a.len() + 4096, stream.len() - 1] {
            let mut r = Reader::default();
            let mut got = Vec::new();
            for part in [&stream[..cut], &stream[cut..]] {
                r.push(part);
                while let Some(m) = r.next_message().expect("valid") {
                    got.push(m);
                }
            }
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(
                (got[0].0.stream_id, got[0].1.as_slice()),
                (1, &b"first"[..])
            );
            assert_eq!(
                (got[1].0.stream_id, got[1].0.kind, got[1].1.len()),
                (3, TYPE_RESPONSE, 5000)
            );
        }
        let mut r = Reader::default();
        let mut n = 0;
        for byte in &stream {
            r.push(std::slice::from_ref(byte));
            n += usize::from(r.next_message().expect("valid").is_some());
        }
        assert_eq!(n, 2);
    }

    #[test]
    fn oversized_header_is_an_error() {
        let mut r = Reader::default();
        let mut h = ((MAX_MESSAGE + 1) as u32).to_be_bytes().to_vec();
        h.extend_from_slice(&[0, 0, 0, 1, 1, 0]);
        r.push(&h);
        assert_eq!(
            r.next_message(),
            Err(MessageError::TooLarge(MAX_MESSAGE + 1))
        );
    }
}
