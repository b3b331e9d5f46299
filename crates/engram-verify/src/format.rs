//! The export file: a header, then framed records, written and read as a stream.
//!
//! ```text
//! file    = MAGIC version:u16be record*
//! record  = tag:u8 length:u32be payload[length]
//! ```
//!
//! | tag | record | payload |
//! |---|---|---|
//! | `O` | header (first) | origin (str), exporting node id (u64), head index at export (u64), checksum (16 bytes) |
//! | `E` | audit entry | the signed entry, exactly as stored (engram-audit's encoding) |
//! | `D` | a transaction's datoms (right after its `E`) | entry index (u64), count (u32), each datom's canonical bytes (bytes) |
//! | `R` | the request an agent signed (right after the `D` of an entry that records an agent's signature) | entry index (u64), the request's canonical bytes (bytes) |
//! | `C` | checkpoint (right after the entry that completes its tree size) | the signed note text |
//! | `Z` | end (last) | entries (u64), checkpoints (u64) |
//!
//! Strings and byte strings are u32-length-prefixed (engram-types' codec). The header's node
//! id is not authenticated by anything in the chain (a node's chain may carry other nodes'
//! attestations, from a snapshot), so the header carries a blake3 checksum of its fields:
//! damage is detected, but the node id remains the exporter's word. Payloads are kept
//! as the bytes that were stored, never re-encoded, so a verifier judges exactly what the node
//! held. There is no whole-file checksum on purpose: every record is checked on its own merits
//! (links, signatures, content hashes, Merkle roots), which is what lets a verifier name the
//! entry that was altered instead of only saying that something was.

use std::io::{self, Read, Write};

use engram_types::DecodeError;
use engram_types::codec::{Reader, Writer};

/// The first bytes of every export.
pub const MAGIC: &[u8; 20] = b"ENGRAM-AUDIT-EXPORT\n";
/// The format version this build writes. Version 2 lets an entry carry no attestation when a
/// later one of the same node covers it (one signature per apply group); a build that reads
/// only version 1 refuses it as newer instead of calling such entries damaged. Version 3 adds
/// the `R` record (and entries that record an agent's signature), which a version 2 reader
/// would refuse record by record.
pub const EXPORT_FORMAT_VERSION: u16 = 3;
/// The oldest format version this build reads: version 1 exports (every entry attested) are
/// valid version 2 content.
pub const OLDEST_READ_FORMAT_VERSION: u16 = 1;
/// The largest record a reader accepts. A transaction is at most a few MiB; a larger length
/// is a damaged frame, refused before anything is allocated for it.
pub const MAX_RECORD_BYTES: u32 = 64 << 20;

const TAG_HEADER: u8 = b'O';
const TAG_ENTRY: u8 = b'E';
const TAG_DATOMS: u8 = b'D';
const TAG_CHECKPOINT: u8 = b'C';
const TAG_REQUEST: u8 = b'R';
const TAG_END: u8 = b'Z';

/// One record of an export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Header {
        origin: String,
        node_id: u64,
        head_index: u64,
    },
    /// A signed audit entry's stored bytes.
    Entry(Vec<u8>),
    /// The canonical bytes of the datoms of the transaction recorded by entry `index`, in
    /// transaction order.
    Datoms {
        index: u64,
        datoms: Vec<Vec<u8>>,
    },
    /// The canonical bytes of the request an agent signed, executed by the transaction of
    /// entry `index`.
    Request {
        index: u64,
        bytes: Vec<u8>,
    },
    /// A signed checkpoint note's text.
    Checkpoint(Vec<u8>),
    End {
        entries: u64,
        checkpoints: u64,
    },
}

impl Record {
    fn tag(&self) -> u8 {
        match self {
            Record::Header { .. } => TAG_HEADER,
            Record::Entry(_) => TAG_ENTRY,
            Record::Datoms { .. } => TAG_DATOMS,
            Record::Request { .. } => TAG_REQUEST,
            Record::Checkpoint(_) => TAG_CHECKPOINT,
            Record::End { .. } => TAG_END,
        }
    }

    fn payload(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Record::Header {
                origin,
                node_id,
                head_index,
            } => {
                w.str(origin).u64(*node_id).u64(*head_index).raw(&header_checksum(
                    origin,
                    *node_id,
                    *head_index,
                ));
            }
            Record::Entry(bytes) | Record::Checkpoint(bytes) => {
                w.raw(bytes);
            }
            Record::Datoms { index, datoms } => {
                w.u64(*index).u32(u32::try_from(datoms.len()).unwrap_or(u32::MAX));
                for d in datoms {
                    w.bytes(d);
                }
            }
            Record::Request { index, bytes } => {
                w.u64(*index).bytes(bytes);
            }
            Record::End { entries, checkpoints } => {
                w.u64(*entries).u64(*checkpoints);
            }
        }
        w.finish()
    }

    fn parse(tag: u8, payload: Vec<u8>) -> Result<Record, String> {
        Self::decode(tag, payload).map_err(|e| e.to_string())?
    }

    /// The outer result is the payload's encoding; the inner one its checksum.
    fn decode(tag: u8, payload: Vec<u8>) -> Result<Result<Record, String>, DecodeError> {
        Ok(Ok(match tag {
            TAG_ENTRY => Record::Entry(payload),
            TAG_CHECKPOINT => Record::Checkpoint(payload),
            TAG_HEADER => {
                let mut r = Reader::new(&payload);
                let origin = r.string("origin")?;
                let node_id = r.u64("node id")?;
                let head_index = r.u64("head index")?;
                if r.take(16, "header checksum")? != header_checksum(&origin, node_id, head_index) {
                    return Ok(Err("the header's checksum does not match its fields".into()));
                }
                r.finish()?;
                Record::Header {
                    origin,
                    node_id,
                    head_index,
                }
            }
            TAG_DATOMS => {
                let mut r = Reader::new(&payload);
                let index = r.u64("entry index")?;
                let count = r.u32("datom count")? as usize;
                // Each datom takes at least its 4-byte length: refuse counts the payload cannot
                // hold before allocating for them.
                if count > r.remaining() / 4 {
                    return Err(DecodeError::Truncated("datoms"));
                }
                let mut datoms = Vec::with_capacity(count);
                for _ in 0..count {
                    datoms.push(r.bytes("datom")?.to_vec());
                }
                r.finish()?;
                Record::Datoms { index, datoms }
            }
            TAG_REQUEST => {
                let mut r = Reader::new(&payload);
                let index = r.u64("entry index")?;
                let bytes = r.bytes("request")?.to_vec();
                r.finish()?;
                Record::Request { index, bytes }
            }
            TAG_END => {
                let mut r = Reader::new(&payload);
                let record = Record::End {
                    entries: r.u64("entry count")?,
                    checkpoints: r.u64("checkpoint count")?,
                };
                r.finish()?;
                record
            }
            tag => return Err(DecodeError::Tag { what: "record", tag }),
        }))
    }
}

fn header_checksum(origin: &str, node_id: u64, head_index: u64) -> [u8; 16] {
    let mut w = Writer::new();
    w.raw(b"engram.export.header.v1")
        .str(origin)
        .u64(node_id)
        .u64(head_index);
    let mut out = [0u8; 16];
    out.copy_from_slice(&engram_types::Hash::of(&w.finish()).as_bytes()[..16]);
    out
}

/// Writes an export, record by record, to any `Write` (a file, a pipe, a gRPC stream).
pub struct ExportWriter<W: Write> {
    out: W,
    bytes: u64,
}

impl<W: Write> ExportWriter<W> {
    /// Writes the magic and format version.
    pub fn new(mut out: W) -> io::Result<ExportWriter<W>> {
        out.write_all(MAGIC)?;
        out.write_all(&EXPORT_FORMAT_VERSION.to_be_bytes())?;
        Ok(ExportWriter {
            out,
            bytes: (MAGIC.len() + 2) as u64,
        })
    }

    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        let payload = record.payload();
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= MAX_RECORD_BYTES)
            .ok_or_else(|| io::Error::other(format!("a record of {} bytes is too large", payload.len())))?;
        self.out.write_all(&[record.tag()])?;
        self.out.write_all(&len.to_be_bytes())?;
        self.out.write_all(&payload)?;
        self.bytes += 5 + u64::from(len);
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Why a file cannot be read as an export at all (as opposed to an export that fails checks).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("not an Engram audit export (the file does not start with the export magic bytes)")]
    NotAnExport,
    #[error(
        "export format version {found} is newer than this build reads (version {EXPORT_FORMAT_VERSION}); verify it with a newer engram"
    )]
    FutureVersion { found: u16 },
    #[error("export format version 0 does not exist; the header is damaged")]
    BadVersion,
    #[error("reading the export: {0}")]
    Io(#[from] io::Error),
}

/// A record that could not be read, at a byte offset: a damaged frame or payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("record at byte {offset}: {reason}")]
pub struct FrameError {
    pub offset: u64,
    pub reason: String,
}

/// What [`ExportReader::next_record`] yields.
pub enum Next {
    Record {
        offset: u64,
        record: Record,
    },
    /// The input ended cleanly between two records.
    Eof,
}

/// Reads an export record by record. After a [`FrameError`] the stream position is lost:
/// nothing further can be framed, so the reader reports end of input from then on.
pub struct ExportReader<R: Read> {
    input: R,
    offset: u64,
    broken: bool,
    version: u16,
}

impl<R: Read> ExportReader<R> {
    /// Checks the magic and version.
    pub fn open(mut input: R) -> Result<ExportReader<R>, OpenError> {
        let mut magic = [0u8; MAGIC.len()];
        if read_full(&mut input, &mut magic)? < magic.len() || &magic != MAGIC {
            return Err(OpenError::NotAnExport);
        }
        let mut version = [0u8; 2];
        if read_full(&mut input, &mut version)? < 2 {
            return Err(OpenError::NotAnExport);
        }
        let version = match u16::from_be_bytes(version) {
            0 => return Err(OpenError::BadVersion),
            v @ OLDEST_READ_FORMAT_VERSION..=EXPORT_FORMAT_VERSION => v,
            found => return Err(OpenError::FutureVersion { found }),
        };
        Ok(ExportReader {
            input,
            offset: (MAGIC.len() + 2) as u64,
            broken: false,
            version,
        })
    }

    /// The format version the file declares.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next record. I/O errors are returned as `Err(Ok(io))`; damaged records as
    /// `Err(Err(frame))`.
    pub fn next_record(&mut self) -> Result<Next, Result<io::Error, FrameError>> {
        if self.broken {
            return Ok(Next::Eof);
        }
        let start = self.offset;
        let mut head = [0u8; 5];
        let got = read_full(&mut self.input, &mut head).map_err(Ok)?;
        if got == 0 {
            return Ok(Next::Eof);
        }
        let fail = |this: &mut Self, reason: String| {
            this.broken = true;
            Err(Err(FrameError {
                offset: start,
                reason,
            }))
        };
        if got < head.len() {
            return fail(
                self,
                format!("the file ends inside a record header ({got} of 5 bytes)"),
            );
        }
        let tag = head[0];
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        if len > MAX_RECORD_BYTES {
            return fail(
                self,
                format!("record length {len} exceeds the {MAX_RECORD_BYTES}-byte limit (damaged frame)"),
            );
        }
        // Read through `take` so a damaged length never allocates more than the input holds.
        let mut payload = Vec::new();
        let read = (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut payload)
            .map_err(Ok)?;
        self.offset += 5 + read as u64;
        if read < len as usize {
            return fail(
                self,
                format!("the file ends inside a record: {read} of {len} payload bytes"),
            );
        }
        match Record::parse(tag, payload) {
            Ok(record) => Ok(Next::Record {
                offset: start,
                record,
            }),
            Err(e) => fail(self, format!("record {:?}: {e}", tag as char)),
        }
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::Header {
                origin: "engram/00".into(),
                node_id: 3,
                head_index: 2,
            },
            Record::Entry(vec![1, 2, 3]),
            Record::Datoms {
                index: 2,
                datoms: vec![vec![9; 10], vec![]],
            },
            Record::Checkpoint(b"note\n".to_vec()),
            Record::End {
                entries: 2,
                checkpoints: 1,
            },
        ]
    }

    fn write(records: &[Record]) -> Vec<u8> {
        let mut w = ExportWriter::new(Vec::new()).unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        w.into_inner().unwrap()
    }

    fn read(bytes: &[u8]) -> (Vec<Record>, Option<FrameError>) {
        let mut r = ExportReader::open(bytes).unwrap();
        let mut out = Vec::new();
        loop {
            match r.next_record() {
                Ok(Next::Record { record, .. }) => out.push(record),
                Ok(Next::Eof) => return (out, None),
                Err(Err(frame)) => return (out, Some(frame)),
                Err(Ok(io)) => panic!("{io}"),
            }
        }
    }

    #[test]
    fn records_round_trip() {
        let records = sample();
        let bytes = write(&records);
        assert_eq!(read(&bytes), (records, None));
    }

    #[test]
    fn headers_are_checked_before_anything_else() {
        let bytes = write(&sample());
        assert!(matches!(
            ExportReader::open(&b"hello"[..]),
            Err(OpenError::NotAnExport)
        ));
        let mut future = bytes.clone();
        future[MAGIC.len()..MAGIC.len() + 2].copy_from_slice(&7u16.to_be_bytes());
        let err = ExportReader::open(&future[..]).err().unwrap();
        assert!(matches!(err, OpenError::FutureVersion { found: 7 }));
        assert!(err.to_string().contains("newer than this build"), "{err}");
        // A version 1 export (before attestations were grouped) is still read.
        let mut old = bytes.clone();
        old[MAGIC.len()..MAGIC.len() + 2].copy_from_slice(&1u16.to_be_bytes());
        assert!(ExportReader::open(&old[..]).is_ok());
    }

    #[test]
    fn a_damaged_frame_is_reported_at_its_offset_and_ends_the_stream() {
        let bytes = write(&sample());
        // Truncation anywhere inside the records: the records before the cut survive.
        let header_len = MAGIC.len() + 2;
        for cut in header_len..bytes.len() {
            let (records, frame) = read(&bytes[..cut]);
            assert!(records.len() < sample().len());
            if let Some(frame) = frame {
                assert!(frame.offset >= header_len as u64);
            }
        }
        // A length field claiming gigabytes is refused without allocating it.
        let mut huge = bytes.clone();
        huge[header_len + 1..header_len + 5].copy_from_slice(&u32::MAX.to_be_bytes());
        let (records, frame) = read(&huge);
        assert!(records.is_empty());
        assert_eq!(frame.unwrap().offset, header_len as u64);
        // An unknown tag.
        let mut tag = bytes.clone();
        tag[header_len] = b'?';
        assert!(read(&tag).1.unwrap().reason.contains("tag"));
    }
}
