//! The export framing alone: `ExportReader::next_record` over arbitrary bytes, until the end
//! of input or the first damaged frame, must never panic; and every record it decodes must
//! round-trip through `ExportWriter`.
//!
//! Input: as for `export_decode`, an input that does not start with `MAGIC` is read as the
//! records after a valid file header (`MAGIC` and format version 1 are prepended), so random
//! bytes reach the record decoder; an input that starts with `MAGIC` (a seed export) is used
//! as it is.
//!
//! Properties, for every record decoded at byte `offset`:
//! * `offset` is where the previous record ended, and the reader's offset afterwards is at
//!   most the input's length;
//! * written alone with `ExportWriter`, the record reads back as the same record, followed by
//!   a clean end of input;
//! * the frame written is byte for byte the frame read (`input[offset..reader.offset()]`):
//!   every payload is decoded strictly (no trailing bytes, checksummed header), so a record
//!   has exactly one encoding.
//!
//! After a damaged frame the reader must report end of input from then on.

#![no_main]

use engram_verify::format::{ExportReader, ExportWriter, MAGIC, Next};
use engram_verify::EXPORT_FORMAT_VERSION;
use libfuzzer_sys::fuzz_target;

const FILE_HEADER_LEN: usize = MAGIC.len() + 2;

fuzz_target!(|data: &[u8]| {
    let input: Vec<u8> = if data.starts_with(MAGIC) {
        data.to_vec()
    } else {
        let mut v = Vec::with_capacity(FILE_HEADER_LEN + data.len());
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&EXPORT_FORMAT_VERSION.to_be_bytes());
        v.extend_from_slice(data);
        v
    };
    let Ok(mut reader) = ExportReader::open(&input[..]) else {
        // Only an input that kept `MAGIC` but cut or changed the version gets here.
        assert_ne!(
            input.get(MAGIC.len()..FILE_HEADER_LEN),
            Some(&EXPORT_FORMAT_VERSION.to_be_bytes()[..]),
            "a valid file header was refused"
        );
        return;
    };
    assert_eq!(reader.offset() as usize, FILE_HEADER_LEN);
    let mut expected_offset = FILE_HEADER_LEN as u64;
    loop {
        match reader.next_record() {
            Ok(Next::Record { offset, record }) => {
                assert_eq!(offset, expected_offset, "a record does not start where the last ended");
                let end = reader.offset();
                assert!(end as usize <= input.len() && end >= offset + 5);
                let frame = &input[offset as usize..end as usize];

                let mut written = ExportWriter::new(Vec::new()).expect("writing to a Vec");
                written.write(&record).expect("a decoded record is within the size limit");
                let bytes_written = written.bytes_written();
                let rewritten = written.into_inner().expect("flushing a Vec");
                assert_eq!(bytes_written as usize, rewritten.len());
                assert_eq!(
                    &rewritten[FILE_HEADER_LEN..],
                    frame,
                    "record {record:?} re-encodes differently"
                );

                let mut again = ExportReader::open(&rewritten[..]).expect("a written export opens");
                match again.next_record() {
                    Ok(Next::Record { offset, record: back }) => {
                        assert_eq!(offset as usize, FILE_HEADER_LEN);
                        assert_eq!(back, record, "the record does not round-trip");
                    }
                    Ok(Next::Eof) => panic!("the rewritten record {record:?} reads as end of input"),
                    Err(e) => panic!("the rewritten record {record:?} does not read back: {:?}", e.map(|io| io.to_string())),
                }
                assert!(matches!(again.next_record(), Ok(Next::Eof)));
                expected_offset = end;
            }
            Ok(Next::Eof) => {
                assert_eq!(reader.offset() as usize, input.len(), "end of input reported early");
                break;
            }
            Err(Ok(io)) => panic!("an I/O error reading a byte slice: {io}"),
            Err(Err(frame)) => {
                assert_eq!(frame.offset, expected_offset, "a damaged frame reported at the wrong offset");
                // The stream position is lost: the reader must say end of input from now on.
                for _ in 0..2 {
                    assert!(matches!(reader.next_record(), Ok(Next::Eof)));
                }
                break;
            }
        }
    }
});
