//! The saved-cache file: resident prefixes (salt, token ids) and their KV pages, so that a page
//! reload or a new process starts warm. Nothing in a file is trusted: a file whose format or KV
//! layout version, model or shapes differ from the engine's, or whose checksum fails, is refused
//! with [`Error::CacheFile`] and the engine's cache is left as it was.
//!
//! Layout (little-endian): `MAGIC` (8 bytes) · header length (u32) · header (JSON, [`Header`]) ·
//! page data · CRC-32 of everything before it (u32). Page data is page by page: for each saved
//! page in order, for each layer, its K then its V (`layer_page_bytes` each, the GPU's own page
//! layout, f16 pairs packed in u32). A writer can therefore stream the file a batch of pages at a
//! time ([`head`], then the pages, then the CRC), never holding all of it.

use serde::{Deserialize, Serialize};

use crate::cache::kv::KvShape;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"HPKVSAVE";

/// Bump when the file layout or the KV page layout on the GPU changes. (2: page data page by
/// page; 1 had it layer by layer.)
pub const LAYOUT_VERSION: u32 = 2;

/// What the file's pages are: they load only into an engine with the same values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// The model's identity, as the caller gives it (the browser package uses the file's sha256).
    pub model: String,
    /// What a position holds.
    #[serde(flatten)]
    pub kv: KvShape,
    /// Positions per page.
    pub page_size: usize,
    /// Which of LongRoPE's frequency factors rotated the saved K (`"long"`, `"short"`), for a
    /// model with both: the context window picks them, so a file saved under the other is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_rope: Option<String>,
    /// What computed the pages: the adapter (its whole info: name, vendor, device, backend, driver)
    /// and the kernel variant. K/V that other kernels or another driver computed are not what a
    /// cold run here computes, so a file saved elsewhere (or before a driver update) is refused
    /// and the prompts run cold.
    #[serde(default)]
    pub kernels: String,
}

/// One saved prefix: its salt, its tokens, and the indices of its pages in the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedPrefix {
    pub salt: String,
    pub tokens: Vec<u32>,
    pub pages: Vec<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    pub version: u32,
    pub shape: Shape,
    /// Pages in the file.
    pub pages: u32,
    /// Most recently used first.
    pub prefixes: Vec<SavedPrefix>,
}

fn bad(detail: impl Into<String>) -> Error {
    Error::CacheFile(detail.into())
}

/// The file's first bytes: magic, header length and header. The page data and the CRC-32 of
/// everything before it follow.
pub fn head(header: &Header) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(header).map_err(|e| bad(e.to_string()))?;
    let json_len = u32::try_from(json.len()).map_err(|_| bad("header over 4 GiB"))?;
    let mut out = Vec::with_capacity(12 + json.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&json_len.to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

/// The whole file for `header` and its page data.
#[cfg(test)]
pub fn encode(header: &Header, data: &[u8]) -> Result<Vec<u8>> {
    let mut out = head(header)?;
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The header and page data of a file, checked: magic, checksum, version, the expected shape,
/// the data's length (`page_bytes` a page: K and V of every layer), and every prefix's pages and
/// length. `vocab` bounds the token ids.
pub fn decode<'a>(file: &'a [u8], expect: &Shape, page_bytes: u64, vocab: usize) -> Result<(Header, &'a [u8])> {
    if file.len() < 16 || &file[..8] != MAGIC {
        return Err(bad("not a hotprefix saved-cache file"));
    }
    let (body, crc) = file.split_at(file.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return Err(bad("checksum mismatch: the file is corrupt or truncated"));
    }
    let json_len = u32::from_le_bytes([body[8], body[9], body[10], body[11]]) as usize;
    let json = body.get(12..12usize.saturating_add(json_len)).ok_or_else(|| bad("header past the end of the file"))?;
    let header: Header = serde_json::from_slice(json).map_err(|e| bad(format!("header: {e}")))?;
    if header.version != LAYOUT_VERSION {
        return Err(bad(format!("layout version {}, this engine reads {LAYOUT_VERSION}", header.version)));
    }
    if header.shape != *expect {
        return Err(bad(format!("saved for {:?}, this engine is {:?}", header.shape, expect)));
    }
    let data = &body[12 + json_len..];
    let want = (header.pages as u64).checked_mul(page_bytes).ok_or_else(|| bad("page count overflows"))?;
    if data.len() as u64 != want {
        return Err(bad(format!("{} bytes of page data, {} pages need {want}", data.len(), header.pages)));
    }
    let ps = expect.page_size;
    // A page's K/V depend on every token before it, so prefixes may share a page only when they
    // agree (salt and tokens) up to its end: anything else would hand one prefix another's K/V.
    let mut meaning: std::collections::HashMap<u32, (&str, &[u32])> = std::collections::HashMap::new();
    for (i, p) in header.prefixes.iter().enumerate() {
        let n = p.tokens.len();
        if n == 0 || p.pages.len() != n.div_ceil(ps) {
            return Err(bad(format!("prefix {i}: {n} tokens in {} pages of {ps}", p.pages.len())));
        }
        if let Some(&pg) = p.pages.iter().find(|&&pg| pg >= header.pages) {
            return Err(bad(format!("prefix {i}: page {pg} of {}", header.pages)));
        }
        if let Some(&t) = p.tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(bad(format!("prefix {i}: token {t} past the vocabulary of {vocab}")));
        }
        for (depth, &page) in p.pages.iter().enumerate() {
            let through = &p.tokens[..((depth + 1) * ps).min(n)];
            let m = *meaning.entry(page).or_insert((p.salt.as_str(), through));
            if m != (p.salt.as_str(), through) {
                return Err(bad(format!("prefix {i}: page {page} holds different tokens in two prefixes")));
            }
        }
    }
    Ok((header, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape { model: "m".into(), kv: KvShape { layers: 2, kv_heads: 1, head_dim: 4 }, page_size: 2, long_rope: None, kernels: "k".into() }
    }

    fn file() -> Vec<u8> {
        let header = Header {
            version: LAYOUT_VERSION,
            shape: shape(),
            pages: 2,
            prefixes: vec![SavedPrefix { salt: String::new(), tokens: vec![1, 2, 3], pages: vec![0, 1] }],
        };
        // 2 layers × (K, V) × 2 pages × 8 bytes
        let data: Vec<u8> = (0..64).collect();
        encode(&header, &data).unwrap()
    }

    #[test]
    fn round_trip() {
        let f = file();
        let (h, data) = decode(&f, &shape(), 32, 10).unwrap();
        assert_eq!(h.prefixes[0].tokens, [1, 2, 3]);
        assert_eq!(data, (0..64).collect::<Vec<u8>>());
    }

    #[test]
    fn every_corruption_is_refused() {
        let f = file();
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x10;
            assert!(matches!(decode(&g, &shape(), 32, 10), Err(Error::CacheFile(_))), "flipped byte {i} was accepted");
        }
        for n in 0..f.len() {
            assert!(decode(&f[..n], &shape(), 32, 10).is_err(), "a file cut to {n} bytes was accepted");
        }
        let other = Shape { model: "other".into(), ..shape() };
        let e = decode(&f, &other, 32, 10).unwrap_err();
        assert!(e.to_string().contains("saved for"), "{e}");
        // K rotated with LongRoPE's other factors.
        let long = Shape { long_rope: Some("long".into()), ..shape() };
        assert!(matches!(decode(&f, &long, 32, 10), Err(Error::CacheFile(_))), "a file of the other RoPE factors was accepted");
        // K/V computed by other kernels, or on another adapter or driver.
        let elsewhere = Shape { kernels: "other adapter".into(), ..shape() };
        assert!(matches!(decode(&f, &elsewhere, 32, 10), Err(Error::CacheFile(_))), "a file computed by other kernels was accepted");
        assert!(decode(&f, &shape(), 32, 3).is_err(), "tokens past the vocabulary");
    }

    #[test]
    fn a_page_shared_by_prefixes_must_hold_the_same_tokens() {
        let prefix = |tokens: Vec<u32>, pages: Vec<u32>| SavedPrefix { salt: String::new(), tokens, pages };
        let header = |prefixes| Header { version: LAYOUT_VERSION, shape: shape(), pages: 2, prefixes };
        let data = vec![0u8; 64];
        let shared = encode(&header(vec![prefix(vec![1, 2, 3], vec![0, 1]), prefix(vec![1, 2], vec![0])]), &data).unwrap();
        assert!(decode(&shared, &shape(), 32, 10).is_ok());
        for bad in [
            vec![prefix(vec![1, 2, 3], vec![0, 1]), prefix(vec![1, 9], vec![0])], // other tokens
            vec![prefix(vec![1, 2, 3], vec![0, 1]), prefix(vec![5, 6, 1, 2], vec![1, 0])], // other position
            vec![prefix(vec![1, 2, 1, 2], vec![0, 0])],                           // twice in one prefix
        ] {
            let f = encode(&header(bad.clone()), &data).unwrap();
            assert!(decode(&f, &shape(), 32, 10).is_err(), "{bad:?} accepted");
        }
        // The same tokens in the shared page, after different ones: its K/V differ.
        let three = Header { pages: 3, ..header(vec![prefix(vec![1, 2, 3], vec![0, 1]), prefix(vec![5, 2, 3], vec![2, 1])]) };
        let f = encode(&three, &[0u8; 96]).unwrap();
        assert!(decode(&f, &shape(), 32, 10).is_err(), "a page shared after different earlier tokens was accepted");
    }
}
