//! Fuzz target `wire`: the HTTP/1.1 framing both ends of a call go through
//! (`callback::h1`), our own code on the path of every call.
//!
//! The first input byte picks a mode:
//! - 0: the rest is what a client sent: a request head, then its body;
//! - 1: the rest is what a handler answered: a response head, then its body;
//! - 2: the rest drives a generator (`arbitrary::Unstructured`) of chunked
//!   bodies (chunk sizes, extensions, trailers) and of where the reads split
//!   them.
//!
//! Whatever the input: nothing panics; a head's length and its path lie
//! inside what was read; a body is never longer than the limit, a
//! Content-Length body that fit is exactly that long, and the bytes after a
//! body are left as they were; a chunked body reads back as the chunks that
//! made it, however the reads split it.
#![no_main]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use arbitrary::{Result, Unstructured};
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use neko_sidecar::callback::h1::{self, Framing};
use tokio::io::{AsyncRead, ReadBuf};

/// The body limit the modes read with: small, so it is reached often.
const LIMIT: usize = 300;

/// Bytes handed out in pieces of the given sizes (then all that is left).
struct Pieces {
    data: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
}

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let left = self.data.len() - self.at;
        let want = if self.sizes.is_empty() {
            left
        } else {
            self.sizes.remove(0).max(1)
        };
        let n = want.min(left).min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// Runs a future over an in-memory reader, which never has to wait.
fn now<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-memory reader never waits"),
    }
}

/// Reads a body of `framing` from `rest` (in pieces of `sizes`), checking
/// what must hold of any body.
fn body(framing: Framing, rest: &[u8], sizes: Vec<usize>) -> io::Result<(Bytes, bool, BytesMut)> {
    let mut io = Pieces {
        data: rest.to_vec(),
        at: 0,
        sizes,
    };
    let mut buf = BytesMut::new();
    let (b, over) = now(h1::read_body(&mut io, &mut buf, framing, LIMIT))?;
    assert!(b.len() <= LIMIT);
    match framing {
        Framing::Empty => assert!(b.is_empty() && !over),
        Framing::Length(n) => {
            assert_eq!(over, n > LIMIT as u64);
            assert_eq!(b.len() as u64, n.min(LIMIT as u64));
            assert_eq!(&b[..], &rest[..b.len()]);
        }
        Framing::UntilClose => {
            assert_eq!(over, rest.len() > LIMIT);
            assert_eq!(&b[..], &rest[..b.len()]);
        }
        Framing::Chunked => {}
    }
    // What was read past the body is still the input's, in order.
    let consumed = io.at - buf.len();
    assert_eq!(&buf[..], &rest[consumed..io.at]);
    Ok((b, over, buf))
}

fn request(data: &[u8]) {
    let Ok(Some(head)) = h1::parse_request(data) else {
        return;
    };
    assert!(head.len <= data.len() && head.len <= h1::MAX_HEAD_BYTES);
    assert!(head.path.end <= head.len);
    assert_ne!(head.meta.framing, Framing::UntilClose, "a request body never ends with the connection");
    let _ = body(head.meta.framing, &data[head.len..], Vec::new());
}

fn response(data: &[u8]) {
    let Ok(Some(head)) = h1::parse_response(data) else {
        return;
    };
    assert!(head.len <= data.len() && head.len <= h1::MAX_HEAD_BYTES);
    if head.meta.framing == Framing::UntilClose {
        assert!(head.meta.close, "a body that ends with the connection closes it");
    }
    let _ = body(head.meta.framing, &data[head.len..], Vec::new());
}

fn chunked(u: &mut Unstructured<'_>) -> Result<()> {
    let mut wire = Vec::new();
    let mut whole = Vec::new();
    for _ in 0..u.int_in_range(0..=6)? {
        let chunk: Vec<u8> = (0..u.int_in_range(1..=120)?)
            .map(|_| u.arbitrary())
            .collect::<Result<_>>()?;
        if u.arbitrary()? {
            wire.extend_from_slice(format!("{:X}", chunk.len()).as_bytes());
        } else {
            wire.extend_from_slice(format!("{:x}", chunk.len()).as_bytes());
        }
        if u.arbitrary()? {
            wire.extend_from_slice(b";name=value");
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(&chunk);
        wire.extend_from_slice(b"\r\n");
        whole.extend_from_slice(&chunk);
    }
    wire.extend_from_slice(b"0\r\n");
    for _ in 0..u.int_in_range(0..=2)? {
        wire.extend_from_slice(b"x-trailer: t\r\n");
    }
    wire.extend_from_slice(b"\r\n");
    let after: Vec<u8> = (0..u.int_in_range(0..=20)?)
        .map(|_| u.arbitrary())
        .collect::<Result<_>>()?;
    let mut input = wire.clone();
    input.extend_from_slice(&after);
    let sizes: Vec<usize> = (0..u.int_in_range(0..=40)?)
        .map(|_| u.int_in_range(1..=64))
        .collect::<Result<_>>()?;
    let (b, over, _) = body(Framing::Chunked, &input, sizes).expect("a well-formed chunked body reads");
    assert_eq!(over, whole.len() > LIMIT);
    assert_eq!(&b[..], &whole[..whole.len().min(LIMIT)]);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => request(rest),
        1 => response(rest),
        _ => {
            let _ = chunked(&mut Unstructured::new(rest));
        }
    }
});
