//! The canonical binary encoding's building blocks: big-endian fixed-width integers and
//! `u32`-length-prefixed byte strings. Shared by every format that is hashed or stored
//! (datoms here, audit entries in `engram-audit`, state rows in `engram-core`), so there is
//! one definition of "canonical".

use crate::DecodeError;

/// Appends canonical fields to a buffer.
#[derive(Default, Debug)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    pub fn with_capacity(capacity: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(capacity),
        }
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn f64(&mut self, v: f64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_bits().to_be_bytes());
        self
    }

    /// Length-prefixed bytes. Panics only if a single field exceeds 4 GiB, which validation
    /// (at most [`crate::MAX_VALUE_BYTES`] per value) rules out before anything is encoded.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        let len = u32::try_from(v.len()).expect("field larger than 4 GiB reached the encoder");
        self.u32(len);
        self.buf.extend_from_slice(v);
        self
    }

    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    pub fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(x) => self.u8(1).i64(x),
        }
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads canonical fields, failing with a [`DecodeError`] (never panicking) on short or
/// malformed input.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated(what));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    pub fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    pub fn f64(&mut self, what: &'static str) -> Result<f64, DecodeError> {
        Ok(f64::from_bits(u64::from_be_bytes(self.array(what)?)))
    }

    pub fn hash(&mut self, what: &'static str) -> Result<crate::Hash, DecodeError> {
        Ok(crate::Hash(self.array(what)?))
    }

    pub fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(what)? as usize;
        self.take(len, what)
    }

    pub fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let raw = self.bytes(what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::Utf8(what))
    }

    pub fn opt_i64(&mut self, what: &'static str) -> Result<Option<i64>, DecodeError> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(self.i64(what)?)),
            tag => Err(DecodeError::Tag { what, tag }),
        }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Fails unless every byte was consumed: canonical forms have no trailing data.
    pub fn finish(self) -> Result<(), DecodeError> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut w = Writer::new();
        w.u8(7)
            .u64(42)
            .i64(-3)
            .str("hé")
            .opt_i64(Some(9))
            .opt_i64(None)
            .f64(2.5);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u8("a").unwrap(), 7);
        assert_eq!(r.u64("b").unwrap(), 42);
        assert_eq!(r.i64("c").unwrap(), -3);
        assert_eq!(r.string("d").unwrap(), "hé");
        assert_eq!(r.opt_i64("e").unwrap(), Some(9));
        assert_eq!(r.opt_i64("f").unwrap(), None);
        assert_eq!(r.f64("g").unwrap(), 2.5);
        r.finish().unwrap();

        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let all = (|| {
                r.u8("a")?;
                r.u64("b")?;
                r.i64("c")?;
                r.string("d")?;
                r.opt_i64("e")?;
                r.opt_i64("f")?;
                r.f64("g")
            })();
            assert!(all.is_err(), "a cut at {cut} must not decode");
        }
    }
}
