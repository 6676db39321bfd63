//! HTTP/1.1 on the wire, as much of it as the callback path needs, for both
//! sides: reading a message head (with `httparse`), working out how its body
//! is delimited (RFC 9112, section 6), and reading that body within a limit
//! (`Content-Length`, `chunked`, or to the end of the connection).
//!
//! Why not hyper: the server (`server.rs`) and the http handler's client
//! (`http_handler.rs`) are the hot path of every call, and hyper's general
//! machinery (a dispatcher, header maps, a connection task and a channel per
//! client connection) was about half of the sidecar's instructions per call
//! (BENCHMARKS.md, benchmark 1). What a message means is decided by the two
//! users; this module only frames bytes, and is strict about it: anything
//! ambiguous (two different lengths, a transfer coding other than chunked, a
//! malformed chunk) is an error, never a guess, so a body is never read
//! differently from how its sender framed it.

use std::io;
use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest message head accepted: request or status line and headers.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields in one head.
pub const MAX_HEADERS: usize = 64;
/// The longest chunk-size line or trailer line accepted.
const MAX_LINE_BYTES: usize = 4096;
/// Reads ask for at least this much room.
pub const READ_CHUNK: usize = 8 * 1024;

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (no length and no coding on a request; 1xx, 204, 304).
    Empty,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// A response without either: the body ends when the connection does.
    UntilClose,
}

/// What a head says about its body and its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub framing: Framing,
    /// The connection ends after this message: `Connection: close`, HTTP/1.0
    /// without `keep-alive`, or a framing that leaves no other choice.
    pub close: bool,
    /// `Expect: 100-continue` (requests).
    pub expect_continue: bool,
}

/// A head that cannot be read as its sender meant it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    /// Over `MAX_HEAD_BYTES` or `MAX_HEADERS`.
    TooLarge,
    /// Not HTTP/1.x, or framed ambiguously; the text says what.
    Malformed(String),
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge => write!(
                f,
                "the message head is larger than {MAX_HEAD_BYTES} bytes or has more than {MAX_HEADERS} fields"
            ),
            Self::Malformed(why) => f.write_str(why),
        }
    }
}

fn malformed(why: impl Into<String>) -> HeadError {
    HeadError::Malformed(why.into())
}

/// Whether `value` is a comma-separated list holding `token` (any case).
fn has_token(value: &[u8], token: &str) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// Reads the framing headers of a head. `version` is the minor version
/// (HTTP/1.0 or 1.1); `response` is `Some(status)` for a response.
pub fn meta(
    headers: &[httparse::Header<'_>],
    version: u8,
    response: Option<u16>,
) -> Result<Meta, HeadError> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut coded = false;
    let mut close = false;
    let mut keep_alive = false;
    let mut expect_continue = false;
    for h in headers {
        let name = h.name;
        // The length first: most fields are none of these four.
        if !matches!(name.len(), 14 | 17 | 10 | 6) {
            continue;
        }
        if name.eq_ignore_ascii_case("content-length") {
            // A list of equal values is one length (RFC 9112, 6.3).
            for part in h.value.split(|&b| b == b',') {
                let n = parse_length(part.trim_ascii())
                    .ok_or_else(|| malformed("the Content-Length is not a number"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(malformed("two different Content-Length values"));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            for coding in h.value.split(|&b| b == b',') {
                let coding = coding.trim_ascii();
                if coding.is_empty() {
                    continue;
                }
                if chunked || !coding.eq_ignore_ascii_case(b"chunked") {
                    // Chunked must come last and once; no other coding is
                    // decoded here.
                    return Err(malformed(format!(
                        "the transfer coding `{}` is not supported (only chunked)",
                        String::from_utf8_lossy(coding)
                    )));
                }
                chunked = true;
            }
            coded = true;
        } else if name.eq_ignore_ascii_case("connection") {
            close |= has_token(h.value, "close");
            keep_alive |= has_token(h.value, "keep-alive");
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue |= h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        }
    }
    if coded && !chunked {
        return Err(malformed("an empty Transfer-Encoding"));
    }
    let close = close || (version == 0 && !keep_alive);
    let bodiless = response.is_some_and(|s| (100..200).contains(&s) || s == 204 || s == 304);
    let (framing, close) = if bodiless {
        (Framing::Empty, close)
    } else if chunked {
        // A length next to a coding may be a smuggling attempt: the coding
        // wins and the connection is not trusted with another message.
        (Framing::Chunked, close || length.is_some())
    } else if let Some(n) = length {
        (Framing::Length(n), close)
    } else if response.is_some() {
        (Framing::UntilClose, true)
    } else {
        (Framing::Empty, close)
    };
    Ok(Meta {
        framing,
        close,
        expect_continue,
    })
}

/// What the head of a request says, its path as a range of the head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The head's length in bytes, up to and with its empty line.
    pub len: usize,
    pub post: bool,
    pub path: Range<usize>,
    pub meta: Meta,
}

/// Reads a request head from the start of `buf`: `Ok(None)` while it is
/// incomplete.
pub fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let Some(len) = complete(req.parse(buf), buf.len())? else {
        return Ok(None);
    };
    let path = req.path.unwrap_or("");
    let start = path.as_ptr() as usize - buf.as_ptr() as usize;
    Ok(Some(RequestHead {
        len,
        post: req.method == Some("POST"),
        path: start..start + path.len(),
        meta: meta(req.headers, req.version.unwrap_or(1), None)?,
    }))
}

/// What the head of a response says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The head's length in bytes, up to and with its empty line.
    pub len: usize,
    pub status: u16,
    pub meta: Meta,
}

/// Reads a response head from the start of `buf`: `Ok(None)` while it is
/// incomplete.
pub fn parse_response(buf: &[u8]) -> Result<Option<ResponseHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let Some(len) = complete(resp.parse(buf), buf.len())? else {
        return Ok(None);
    };
    let status = resp.code.unwrap_or(0);
    Ok(Some(ResponseHead {
        len,
        status,
        meta: meta(resp.headers, resp.version.unwrap_or(1), Some(status))?,
    }))
}

/// httparse's verdict on a head, within `MAX_HEAD_BYTES`.
fn complete(parsed: httparse::Result<usize>, available: usize) -> Result<Option<usize>, HeadError> {
    match parsed {
        Ok(httparse::Status::Complete(n)) if n > MAX_HEAD_BYTES => Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(n)) => Ok(Some(n)),
        Ok(httparse::Status::Partial) if available > MAX_HEAD_BYTES => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(e) => Err(malformed(format!("not HTTP/1.1 ({e})"))),
    }
}

/// Digits only, no sign, no overflow.
fn parse_length(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// Reads from `io` into `buf`, making room first. `Ok(0)` is the end.
pub async fn fill<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) -> io::Result<usize> {
    if buf.capacity() - buf.len() < READ_CHUNK / 2 {
        buf.reserve(READ_CHUNK);
    }
    io.read_buf(buf).await
}

fn unexpected_end() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the connection closed before the message was complete",
    )
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// Reads the body `framing` delimits, whose first bytes may already be in
/// `buf`, keeping at most `limit` bytes of it. The flag says there was more:
/// reading stopped at the limit, the rest is unread and the connection must
/// not carry another message. Bytes past the body stay in `buf`.
pub async fn read_body<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    framing: Framing,
    limit: usize,
) -> io::Result<(Bytes, bool)> {
    match framing {
        Framing::Empty => Ok((Bytes::new(), false)),
        Framing::Length(n) => {
            let over = n > limit as u64;
            let want = if over { limit } else { n as usize };
            while buf.len() < want {
                if buf.capacity() < want {
                    buf.reserve(want - buf.len());
                }
                if fill(io, buf).await? == 0 {
                    return Err(unexpected_end());
                }
            }
            Ok((buf.split_to(want).freeze(), over))
        }
        Framing::UntilClose => {
            while buf.len() <= limit {
                if fill(io, buf).await? == 0 {
                    let all = buf.split().freeze();
                    return Ok((all, false));
                }
            }
            Ok((buf.split_to(limit).freeze(), true))
        }
        Framing::Chunked => read_chunked(io, buf, limit).await,
    }
}

/// Reads one CRLF-terminated line's length (without the CRLF), reading more
/// as needed; the line stays in `buf`.
async fn line<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) -> io::Result<usize> {
    let mut searched = 0;
    loop {
        if let Some(i) = buf[searched..].windows(2).position(|w| w == b"\r\n") {
            return Ok(searched + i);
        }
        if buf.len() > MAX_LINE_BYTES {
            return Err(invalid("a chunk-size or trailer line is too long"));
        }
        searched = buf.len().saturating_sub(1);
        if fill(io, buf).await? == 0 {
            return Err(unexpected_end());
        }
    }
}

async fn read_chunked<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    limit: usize,
) -> io::Result<(Bytes, bool)> {
    let mut out = BytesMut::new();
    loop {
        let end = line(io, buf).await?;
        let size = match httparse::parse_chunk_size(&buf[..end + 2]) {
            Ok(httparse::Status::Complete((_, size))) => size,
            _ => return Err(invalid("a malformed chunk size")),
        };
        buf.advance(end + 2);
        if size == 0 {
            break;
        }
        let room = limit - out.len();
        let over = size > room as u64;
        let mut left = if over { room } else { size as usize };
        while left > 0 {
            if buf.is_empty() && fill(io, buf).await? == 0 {
                return Err(unexpected_end());
            }
            let n = left.min(buf.len());
            out.extend_from_slice(&buf[..n]);
            buf.advance(n);
            left -= n;
        }
        if over {
            return Ok((out.freeze(), true));
        }
        while buf.len() < 2 {
            if fill(io, buf).await? == 0 {
                return Err(unexpected_end());
            }
        }
        if &buf[..2] != b"\r\n" {
            return Err(invalid("a chunk is longer than its size"));
        }
        buf.advance(2);
    }
    // Trailers, ignored, up to the empty line.
    loop {
        let end = line(io, buf).await?;
        buf.advance(end + 2);
        if end == 0 {
            return Ok((out.freeze(), false));
        }
    }
}

/// Appends `n` in decimal.
pub fn push_decimal(out: &mut Vec<u8>, n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h<'a>(name: &'a str, value: &'a str) -> httparse::Header<'a> {
        httparse::Header {
            name,
            value: value.as_bytes(),
        }
    }

    fn framing(headers: &[httparse::Header<'_>]) -> Result<Meta, HeadError> {
        meta(headers, 1, None)
    }

    #[test]
    fn a_request_body_is_delimited_by_length_or_chunked_or_absent() {
        let m = framing(&[h("Content-Length", "12")]).unwrap();
        assert_eq!((m.framing, m.close), (Framing::Length(12), false));
        let m = framing(&[h("content-length", "3, 3")]).unwrap();
        assert_eq!(m.framing, Framing::Length(3));
        let m = framing(&[h("Transfer-Encoding", "Chunked")]).unwrap();
        assert_eq!((m.framing, m.close), (Framing::Chunked, false));
        assert_eq!(framing(&[]).unwrap().framing, Framing::Empty);
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        for bad in [
            vec![h("Content-Length", "3"), h("Content-Length", "4")],
            vec![h("Content-Length", "3, 4")],
            vec![h("Content-Length", "-1")],
            vec![h("Content-Length", "+1")],
            vec![h("Content-Length", "")],
            vec![h("Content-Length", "99999999999999999999")],
            vec![h("Transfer-Encoding", "gzip, chunked")],
            vec![h("Transfer-Encoding", "chunked, gzip")],
            vec![h("Transfer-Encoding", "chunked, chunked")],
            vec![h("Transfer-Encoding", "")],
        ] {
            assert!(framing(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_length_beside_chunked_closes_the_connection_after() {
        let m = framing(&[h("Content-Length", "5"), h("Transfer-Encoding", "chunked")]).unwrap();
        assert_eq!((m.framing, m.close), (Framing::Chunked, true));
    }

    #[test]
    fn the_connection_closes_on_close_or_on_http_1_0_without_keep_alive() {
        assert!(
            framing(&[h("Connection", "Keep-Alive, Close")])
                .unwrap()
                .close
        );
        assert!(meta(&[], 0, None).unwrap().close);
        assert!(
            !meta(&[h("connection", "keep-alive")], 0, None)
                .unwrap()
                .close
        );
        assert!(!framing(&[h("Connection", "upgrade")]).unwrap().close);
    }

    #[test]
    fn responses_without_a_length_end_with_the_connection() {
        let m = meta(&[], 1, Some(200)).unwrap();
        assert_eq!((m.framing, m.close), (Framing::UntilClose, true));
        for bodiless in [100, 204, 304] {
            let m = meta(&[h("Content-Length", "10")], 1, Some(bodiless)).unwrap();
            assert_eq!(m.framing, Framing::Empty, "{bodiless}");
        }
    }

    #[test]
    fn expect_continue_is_noticed() {
        assert!(
            framing(&[h("Expect", "100-Continue")])
                .unwrap()
                .expect_continue
        );
        assert!(!framing(&[]).unwrap().expect_continue);
    }

    async fn read(wire: &[u8], framing: Framing, limit: usize) -> io::Result<(Bytes, bool, Bytes)> {
        // One byte at a time through the reader too, to cross every boundary.
        let mut io = tokio_test_reader(wire);
        let mut buf = BytesMut::new();
        let (b, over) = read_body(&mut io, &mut buf, framing, limit).await?;
        Ok((b, over, buf.freeze()))
    }

    /// A reader handing out its bytes one at a time.
    fn tokio_test_reader(wire: &[u8]) -> impl AsyncRead + Unpin {
        struct OneByOne(Vec<u8>, usize);
        impl AsyncRead for OneByOne {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                if self.1 < self.0.len() {
                    let b = self.0[self.1];
                    buf.put_slice(&[b]);
                    self.1 += 1;
                }
                std::task::Poll::Ready(Ok(()))
            }
        }
        OneByOne(wire.to_vec(), 0)
    }

    #[tokio::test]
    async fn a_length_body_is_read_and_what_follows_is_left() {
        let (b, over, _) = read(b"hello", Framing::Length(5), 100).await.unwrap();
        assert_eq!((&b[..], over), (&b"hello"[..], false));
        // Bytes already read past the body (a pipelined request) stay.
        let mut buf = BytesMut::from(&b"hello NEXT"[..]);
        let mut io = tokio_test_reader(b"");
        let (b, _) = read_body(&mut io, &mut buf, Framing::Length(5), 100)
            .await
            .unwrap();
        assert_eq!((&b[..], &buf[..]), (&b"hello"[..], &b" NEXT"[..]));
        let (b, over, _) = read(b"hello", Framing::Length(5), 3).await.unwrap();
        assert_eq!((&b[..], over), (&b"hel"[..], true));
        let e = read(b"hel", Framing::Length(5), 100).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn a_chunked_body_is_decoded_with_extensions_and_trailers() {
        let wire = b"5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
        let (b, over, rest) = read(wire, Framing::Chunked, 100).await.unwrap();
        assert_eq!(&b[..], b"hello 0123456789");
        assert!(!over);
        assert!(rest.is_empty());
        let (b, over, _) = read(wire, Framing::Chunked, 7).await.unwrap();
        assert_eq!((&b[..], over), (&b"hello 0"[..], true));
    }

    #[tokio::test]
    async fn a_malformed_or_cut_chunked_body_is_an_error() {
        for bad in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"3\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\r\n",
            b"5\r\nhel",
        ] {
            assert!(read(bad, Framing::Chunked, 100).await.is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn a_body_until_close_is_everything_up_to_the_end() {
        let (b, over, _) = read(b"all of it", Framing::UntilClose, 100).await.unwrap();
        assert_eq!((&b[..], over), (&b"all of it"[..], false));
        let (b, over, _) = read(b"all of it", Framing::UntilClose, 3).await.unwrap();
        assert_eq!((&b[..], over), (&b"all"[..], true));
    }

    #[test]
    fn decimals_are_written_out() {
        for n in [0, 7, 10, 1234567, usize::MAX] {
            let mut v = Vec::new();
            push_decimal(&mut v, n);
            assert_eq!(String::from_utf8(v).unwrap(), n.to_string());
        }
    }
}
