//! NRI's connection multiplexer (`github.com/containerd/nri/pkg/net/multiplex`): one Unix
//! socket carries two logical connections, each a byte stream cut into frames of
//! `[conn id: u32 BE][length: u32 BE][payload]`. The plugin serves NRI's `Plugin` service on
//! connection 1 and calls the `Runtime` service on connection 2. Pure.
//!
//! The Go reader hands each frame to one `Read` call and fails the whole socket with `ENOMEM`
//! when the caller's buffer is smaller than the frame; ttrpc reads through a 4096-byte
//! `bufio.Reader`. Frames of at most [`MAX_WRITE`] bytes always fit, so that is what we write
//! (Go's own writer does the same through its 4096-byte `bufio.Writer`).

/// The plugin's service (`Plugin`): the runtime calls, the plugin answers.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The runtime's service (`Runtime`): the plugin calls (registration, unsolicited updates).
pub const RUNTIME_SERVICE_CONN: u32 = 2;

pub const HEADER_LEN: usize = 8;
/// The largest frame payload we write (see the module text).
pub const MAX_WRITE: usize = 4096;
/// The largest frame payload we accept: Go's limit, one whole ttrpc message.
pub const MAX_READ: usize = super::ttrpc::HEADER_LEN + super::ttrpc::MAX_MESSAGE;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("multiplexer frame of {0} bytes is above the limit of {MAX_READ}")]
    TooLarge(usize),
    #[error("multiplexer frame for the reserved connection 0")]
    ReservedConn,
}

/// A frame header: which connection, how many payload bytes follow.
pub fn parse_header(h: [u8; HEADER_LEN]) -> Result<(u32, usize), FrameError> {
    let conn = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if conn == 0 {
        return Err(FrameError::ReservedConn);
    }
    if len > MAX_READ {
        return Err(FrameError::TooLarge(len));
    }
    Ok((conn, len))
}

/// Appends `data` for connection `conn` to `out`, cut into frames of at most [`MAX_WRITE`]
/// bytes (an empty `data` is one empty frame, as Go writes it).
pub fn encode(conn: u32, data: &[u8], out: &mut Vec<u8>) {
    let mut push = |chunk: &[u8]| {
        out.extend_from_slice(&conn.to_be_bytes());
        // A chunk is at most MAX_WRITE bytes.
        out.extend_from_slice(&u32::try_from(chunk.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(chunk);
    };
    if data.is_empty() {
        push(data);
    }
    for chunk in data.chunks(MAX_WRITE) {
        push(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits an encoded stream back into (conn, payload) frames.
    fn frames(mut b: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let (conn, len) =
                parse_header(b[..HEADER_LEN].try_into().expect("header")).expect("valid header");
            out.push((conn, b[HEADER_LEN..HEADER_LEN + len].to_vec()));
            b = &b[HEADER_LEN + len..];
        }
        out
    }

    #[test]
    fn frames_are_cut_at_4096_bytes() {
        // (payload length, frame lengths)
        let cases: [(usize, &[usize]); 5] = [
            (0, &[0]),
            (10, &[10]),
            (4096, &[4096]),
            (4097, &[4096, 1]),
            (10_000, &[4096, 4096, 1808]),
        ];
        for (n, want) in cases {
            let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            let mut out = Vec::new();
            encode(RUNTIME_SERVICE_CONN, &data, &mut out);
            let got = frames(&out);
            let lens: Vec<usize> = got.iter().map(|(_, p)| p.len()).collect();
            assert_eq!(lens, want, "{n} bytes");
            assert!(got.iter().all(|(c, _)| *c == RUNTIME_SERVICE_CONN));
            assert_eq!(got.concat_payloads(), data, "{n} bytes reassemble");
        }
    }

    trait Concat {
        fn concat_payloads(&self) -> Vec<u8>;
    }
    impl Concat for Vec<(u32, Vec<u8>)> {
        fn concat_payloads(&self) -> Vec<u8> {
            self.iter().flat_map(|(_, p)| p.iter().copied()).collect()
        }
    }

    #[test]
    fn header_table() {
        let h = |conn: u32, len: u32| {
            let mut b = [0u8; HEADER_LEN];
            b[..4].copy_from_slice(&conn.to_be_bytes());
            b[4..].copy_from_slice(&len.to_be_bytes());
            parse_header(b)
        };
        assert_eq!(h(1, 0), Ok((1, 0)));
        assert_eq!(h(2, 4096), Ok((2, 4096)));
        assert_eq!(h(7, MAX_READ as u32), Ok((7, MAX_READ)));
        assert_eq!(
            h(1, MAX_READ as u32 + 1),
            Err(FrameError::TooLarge(MAX_READ + 1))
        );
        assert_eq!(h(0, 5), Err(FrameError::ReservedConn));
        // Wire order: big endian.
        let mut out = Vec::new();
        encode(1, b"ab", &mut out);
        assert_eq!(out, [0, 0, 0, 1, 0, 0, 0, 2, b'a', b'b']);
    }
}
