//! The pure option-data decoders (`NBD_OPT_INFO`/`GO`, the meta context
//! options, `NBD_OPT_EXPORT_NAME`) on arbitrary bytes: no panic, and
//! whatever decodes re-encodes to exactly the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zftl_nbd::fuzzing::{decode_export_name, InfoRequest, MetaContextRequest};
use zftl_nbd::proto::MAX_STRING_BYTES;

fn ok_string(s: &str) -> bool {
    s.len() <= MAX_STRING_BYTES && !s.contains('\0')
}

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = InfoRequest::decode(data) {
        assert!(ok_string(&r.name));
        let mut b = Vec::new();
        b.extend_from_slice(&(r.name.len() as u32).to_be_bytes());
        b.extend_from_slice(r.name.as_bytes());
        b.extend_from_slice(&(r.requests.len() as u16).to_be_bytes());
        for q in &r.requests {
            b.extend_from_slice(&q.to_be_bytes());
        }
        assert_eq!(b, data, "InfoRequest does not round-trip");
    }
    if let Ok(r) = MetaContextRequest::decode(data) {
        assert!(ok_string(&r.name));
        assert!(r.queries.len() <= 64);
        let mut b = Vec::new();
        b.extend_from_slice(&(r.name.len() as u32).to_be_bytes());
        b.extend_from_slice(r.name.as_bytes());
        b.extend_from_slice(&(r.queries.len() as u32).to_be_bytes());
        for q in &r.queries {
            assert!(ok_string(q));
            b.extend_from_slice(&(q.len() as u32).to_be_bytes());
            b.extend_from_slice(q.as_bytes());
        }
        assert_eq!(b, data, "MetaContextRequest does not round-trip");
    }
    if let Ok(name) = decode_export_name(data) {
        assert!(ok_string(&name));
        assert_eq!(name.as_bytes(), data);
    }
});
