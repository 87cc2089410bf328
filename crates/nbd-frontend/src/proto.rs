//! The NBD wire format: constants, and pure encoders and decoders for the
//! messages the server reads and writes. No I/O here, so every parser can be
//! driven by a fuzzer or a unit test with plain byte slices.
//!
//! Values follow `doc/proto.md` of the NetworkBlockDevice project (fixed
//! newstyle negotiation, structured replies, metadata contexts). Every
//! integer on the wire is big-endian.

/// `NBDMAGIC`, the first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: after `NBDMAGIC`, and in front of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

// Info types (NBD_OPT_INFO / NBD_OPT_GO).
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply flags and chunk types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

// `base:allocation` status flags of a block status descriptor.
/// Not allocated in the backing store (never written, or trimmed).
pub const STATE_HOLE: u32 = 1 << 0;
/// Reads as zeros.
pub const STATE_ZERO: u32 = 1 << 1;

/// The spec's allocation context.
pub const META_BASE_ALLOCATION: &str = "base:allocation";
/// Its id in `NBD_REP_META_CONTEXT` and `NBD_REPLY_TYPE_BLOCK_STATUS`.
pub const META_BASE_ALLOCATION_ID: u32 = 1;
/// The `base:` namespace: a wildcard query when listing.
pub const META_BASE_NAMESPACE: &str = "base:";
/// zftl's namespace (an `x-` one, as the spec asks of unregistered
/// namespaces): a wildcard query when listing.
pub const META_ZFTL_NAMESPACE: &str = "x-zftl:";
/// `x-zftl:changed:NAME`: the blocks that differ between snapshot `NAME`
/// and the export. The prefix alone is a wildcard query when listing.
pub const META_CHANGED_PREFIX: &str = "x-zftl:changed:";

// `x-zftl:changed:NAME` status flags.
/// The block differs between the snapshot and the export (clear: the same).
pub const STATE_CHANGED: u32 = 1 << 0;

/// Bytes of a request header (magic .. length).
pub const REQUEST_HEADER_BYTES: usize = 28;
/// Bytes of the option header after `IHAVEOPT` (option, length).
pub const OPTION_HEADER_BYTES: usize = 16;
/// Longest string (export name, query) the spec allows.
pub const MAX_STRING_BYTES: usize = 4096;

/// NBD error values (the spec's restricted errno set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Errno {
    Perm = 1,
    Io = 5,
    Inval = 22,
    NoSpc = 28,
    Overflow = 75,
    NotSup = 95,
    Shutdown = 108,
}

impl Errno {
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// A decoded transmission request header (the payload of a write follows
/// it on the wire and is not part of this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

/// Why a request header cannot be decoded: the stream is out of sync and the
/// connection must be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadRequestMagic(pub u32);

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

impl RequestHeader {
    pub fn decode(b: &[u8; REQUEST_HEADER_BYTES]) -> Result<RequestHeader, BadRequestMagic> {
        let magic = be_u32(b, 0);
        if magic != REQUEST_MAGIC {
            return Err(BadRequestMagic(magic));
        }
        Ok(RequestHeader {
            flags: be_u16(b, 4),
            command: be_u16(b, 6),
            cookie: be_u64(b, 8),
            offset: be_u64(b, 16),
            length: be_u32(b, 24),
        })
    }

    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut b = [0u8; REQUEST_HEADER_BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.command.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// A cursor over option data that never reads past the end.
struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(data: &'a [u8]) -> Self {
        Cursor { data, at: 0 }
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.data.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| be_u16(b, 0))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| be_u32(b, 0))
    }
    fn string(&mut self, len: u32) -> Option<String> {
        let len = usize::try_from(len).ok()?;
        if len > MAX_STRING_BYTES {
            return None;
        }
        let bytes = self.take(len)?;
        let s = std::str::from_utf8(bytes).ok()?;
        (!s.contains('\0')).then(|| s.to_string())
    }
    fn done(&self) -> bool {
        self.at == self.data.len()
    }
}

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub requests: Vec<u16>,
}

/// Option data that does not parse: answered with `NBD_REP_ERR_INVALID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidOption;

impl InfoRequest {
    pub fn decode(data: &[u8]) -> Result<InfoRequest, InvalidOption> {
        let mut c = Cursor::new(data);
        let len = c.u32().ok_or(InvalidOption)?;
        let name = c.string(len).ok_or(InvalidOption)?;
        let count = c.u16().ok_or(InvalidOption)?;
        let mut requests = Vec::with_capacity(usize::from(count).min(64));
        for _ in 0..count {
            requests.push(c.u16().ok_or(InvalidOption)?);
        }
        if !c.done() {
            return Err(InvalidOption);
        }
        Ok(InfoRequest { name, requests })
    }
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaContextRequest {
    pub name: String,
    pub queries: Vec<String>,
}

/// Queries accepted in one meta context option.
pub const MAX_META_QUERIES: u32 = 64;

impl MetaContextRequest {
    pub fn decode(data: &[u8]) -> Result<MetaContextRequest, InvalidOption> {
        let mut c = Cursor::new(data);
        let len = c.u32().ok_or(InvalidOption)?;
        let name = c.string(len).ok_or(InvalidOption)?;
        let count = c.u32().ok_or(InvalidOption)?;
        if count > MAX_META_QUERIES {
            return Err(InvalidOption);
        }
        let mut queries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = c.u32().ok_or(InvalidOption)?;
            queries.push(c.string(len).ok_or(InvalidOption)?);
        }
        if !c.done() {
            return Err(InvalidOption);
        }
        Ok(MetaContextRequest { name, queries })
    }
}

/// An export name sent with `NBD_OPT_EXPORT_NAME` (the whole option data).
pub fn decode_export_name(data: &[u8]) -> Result<String, InvalidOption> {
    let len = u32::try_from(data.len()).map_err(|_| InvalidOption)?;
    Cursor::new(data).string(len).ok_or(InvalidOption)
}

/// One option reply: header and data.
pub fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply_type.to_be_bytes());
    let len = u32::try_from(data.len()).expect("option replies are small");
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// `NBD_REP_SERVER` data: the name, then a description for humans.
pub fn rep_server_data(name: &str, description: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len() + description.len());
    b.extend_from_slice(&(name.len() as u32).to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(description.as_bytes());
    b
}

/// `NBD_INFO_EXPORT` data.
pub fn info_export(size_bytes: u64, flags: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    b.extend_from_slice(&size_bytes.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b
}

/// `NBD_INFO_NAME` or `NBD_INFO_DESCRIPTION` data.
pub fn info_string(info: u16, s: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + s.len());
    b.extend_from_slice(&info.to_be_bytes());
    b.extend_from_slice(s.as_bytes());
    b
}

/// `NBD_INFO_BLOCK_SIZE` data.
pub fn info_block_size(minimum: u32, preferred: u32, maximum: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(14);
    b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    b.extend_from_slice(&minimum.to_be_bytes());
    b.extend_from_slice(&preferred.to_be_bytes());
    b.extend_from_slice(&maximum.to_be_bytes());
    b
}

/// `NBD_REP_META_CONTEXT` data.
pub fn meta_context_data(id: u32, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len());
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// A simple reply header (data, if any, follows).
pub fn simple_reply(cookie: u64, error: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&error.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk header for a payload of `length` bytes; the
/// payload follows.
pub fn chunk_header(cookie: u64, flags: u16, chunk_type: u16, length: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(20);
    b.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&chunk_type.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&length.to_be_bytes());
    b
}

/// A final `NBD_REPLY_TYPE_ERROR` chunk with a message for humans.
pub fn error_chunk(cookie: u64, error: Errno, message: &str) -> Vec<u8> {
    // The message is capped so the chunk stays small and its length fits.
    let mut end = message.len().min(1024);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let msg = &message.as_bytes()[..end];
    let mut b = chunk_header(
        cookie,
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        6 + msg.len() as u32,
    );
    b.extend_from_slice(&error.code().to_be_bytes());
    b.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    b.extend_from_slice(msg);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_round_trips() {
        let h = RequestHeader {
            flags: CMD_FLAG_FUA,
            command: CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 4096,
            length: 8192,
        };
        assert_eq!(RequestHeader::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[0] = 0;
        assert!(RequestHeader::decode(&bad).is_err());
    }

    #[test]
    fn info_request_parses_and_rejects_garbage() {
        let mut d = Vec::new();
        d.extend_from_slice(&4u32.to_be_bytes());
        d.extend_from_slice(b"zftl");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        let r = InfoRequest::decode(&d).unwrap();
        assert_eq!(r.name, "zftl");
        assert_eq!(r.requests, vec![INFO_NAME, INFO_BLOCK_SIZE]);
        // Truncated, trailing bytes, absurd lengths.
        assert!(InfoRequest::decode(&d[..d.len() - 1]).is_err());
        let mut long = d.clone();
        long.push(0);
        assert!(InfoRequest::decode(&long).is_err());
        assert!(InfoRequest::decode(&u32::MAX.to_be_bytes()).is_err());
        assert!(InfoRequest::decode(&[]).is_err());
    }

    #[test]
    fn meta_context_request_parses() {
        let mut d = Vec::new();
        d.extend_from_slice(&0u32.to_be_bytes());
        d.extend_from_slice(&1u32.to_be_bytes());
        d.extend_from_slice(&(META_BASE_ALLOCATION.len() as u32).to_be_bytes());
        d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
        let r = MetaContextRequest::decode(&d).unwrap();
        assert_eq!(r.name, "");
        assert_eq!(r.queries, vec![META_BASE_ALLOCATION.to_string()]);
        let mut many = Vec::new();
        many.extend_from_slice(&0u32.to_be_bytes());
        many.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(MetaContextRequest::decode(&many).is_err());
    }

    #[test]
    fn names_with_nul_or_bad_utf8_are_invalid() {
        assert!(decode_export_name(b"a\0b").is_err());
        assert!(decode_export_name(&[0xff, 0xfe]).is_err());
        assert_eq!(decode_export_name(b"zftl"), Ok("zftl".to_string()));
    }

    #[test]
    fn error_chunk_caps_its_message() {
        let c = error_chunk(7, Errno::Inval, &"é".repeat(2000));
        let len = u32::from_be_bytes([c[16], c[17], c[18], c[19]]) as usize;
        assert_eq!(c.len(), 20 + len);
        assert!(len <= 6 + 1024);
    }
}
