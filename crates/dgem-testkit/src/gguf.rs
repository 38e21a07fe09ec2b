//! A minimal GGUF writer for tests: metadata of every value type and `F32` /
//! `Q8_0` tensors, laid out as llama.cpp reads them (GGUF v3, 32-byte
//! alignment). [`tiny`] builds whole loadable models with it.
//!
//! ```
//! use dgem_testkit::gguf::GgufWriter;
//! let bytes = GgufWriter::new()
//!     .string("general.architecture", "llama")
//!     .u32("llama.context_length", 2048)
//!     .bytes();
//! assert_eq!(&bytes[..4], b"GGUF");
//! ```

pub mod tiny;
mod vocab;

use std::path::Path;

/// GGUF value types (the `u32` tag before a value).
const TYPE_U32: u32 = 4;
const TYPE_I32: u32 = 5;
const TYPE_F32: u32 = 6;
const TYPE_BOOL: u32 = 7;
const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;
const TYPE_U64: u32 = 10;
/// ggml tensor types.
const GGML_F32: u32 = 0;
const GGML_Q8_0: u32 = 8;
/// Values per `Q8_0` block.
const Q8_0_BLOCK: usize = 32;
/// Data alignment (`general.alignment` default).
const ALIGNMENT: usize = 32;

/// One tensor: name, shape (`ne[0]` first, the row length), ggml type, data.
#[derive(Debug, Clone)]
struct Tensor {
    name: String,
    dims: Vec<u64>,
    ty: u32,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory (see the module docs).
#[derive(Debug, Clone)]
pub struct GgufWriter {
    version: u32,
    kvs: Vec<u8>,
    kv_count: u64,
    tensors: Vec<Tensor>,
    declared_tensors: Option<u64>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

fn raw_string(buf: &mut Vec<u8>, s: &str) {
    buf.extend((s.len() as u64).to_le_bytes());
    buf.extend(s.as_bytes());
}

impl GgufWriter {
    /// An empty GGUF v3 file.
    pub fn new() -> Self {
        Self {
            version: 3,
            kvs: Vec::new(),
            kv_count: 0,
            tensors: Vec::new(),
            declared_tensors: None,
        }
    }

    /// Write `version` in the header (readers refuse all but 2 and 3).
    #[must_use]
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Claim `n` tensors in the header whatever the file holds (for header
    /// readers that must not look past the metadata).
    #[must_use]
    pub fn declared_tensors(mut self, n: u64) -> Self {
        self.declared_tensors = Some(n);
        self
    }

    fn key(&mut self, key: &str, ty: u32) -> &mut Vec<u8> {
        self.kv_count += 1;
        raw_string(&mut self.kvs, key);
        self.kvs.extend(ty.to_le_bytes());
        &mut self.kvs
    }

    /// A string value.
    #[must_use]
    pub fn string(mut self, key: &str, value: &str) -> Self {
        raw_string(self.key(key, TYPE_STRING), value);
        self
    }

    /// A `u32` value.
    #[must_use]
    pub fn u32(mut self, key: &str, value: u32) -> Self {
        self.key(key, TYPE_U32).extend(value.to_le_bytes());
        self
    }

    /// An `i32` value.
    #[must_use]
    pub fn i32(mut self, key: &str, value: i32) -> Self {
        self.key(key, TYPE_I32).extend(value.to_le_bytes());
        self
    }

    /// A `u64` value.
    #[must_use]
    pub fn u64(mut self, key: &str, value: u64) -> Self {
        self.key(key, TYPE_U64).extend(value.to_le_bytes());
        self
    }

    /// An `f32` value.
    #[must_use]
    pub fn f32(mut self, key: &str, value: f32) -> Self {
        self.key(key, TYPE_F32).extend(value.to_le_bytes());
        self
    }

    /// A `bool` value.
    #[must_use]
    pub fn bool(mut self, key: &str, value: bool) -> Self {
        self.key(key, TYPE_BOOL).push(u8::from(value));
        self
    }

    fn array_head(&mut self, key: &str, elem: u32, len: usize) -> &mut Vec<u8> {
        let buf = self.key(key, TYPE_ARRAY);
        buf.extend(elem.to_le_bytes());
        buf.extend((len as u64).to_le_bytes());
        buf
    }

    /// An array of strings.
    #[must_use]
    pub fn string_array<S: AsRef<str>>(mut self, key: &str, items: &[S]) -> Self {
        let buf = self.array_head(key, TYPE_STRING, items.len());
        for item in items {
            raw_string(buf, item.as_ref());
        }
        self
    }

    /// An array of `f32`.
    #[must_use]
    pub fn f32_array(mut self, key: &str, items: &[f32]) -> Self {
        let buf = self.array_head(key, TYPE_F32, items.len());
        for item in items {
            buf.extend(item.to_le_bytes());
        }
        self
    }

    /// An array of `i32`.
    #[must_use]
    pub fn i32_array(mut self, key: &str, items: &[i32]) -> Self {
        let buf = self.array_head(key, TYPE_I32, items.len());
        for item in items {
            buf.extend(item.to_le_bytes());
        }
        self
    }

    /// An `F32` tensor of shape `dims` (`dims[0]` is the row length).
    ///
    /// # Panics
    /// When `data` does not hold the product of `dims` values.
    #[must_use]
    pub fn tensor_f32(mut self, name: &str, dims: &[u64], data: &[f32]) -> Self {
        assert_eq!(count(dims), data.len(), "tensor `{name}`: shape and data");
        self.tensors.push(Tensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty: GGML_F32,
            data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
        self
    }

    /// A `Q8_0` tensor of shape `dims`, quantized from `data` as ggml's
    /// reference quantizer does (blocks of 32: an `f16` scale `max|x| / 127`
    /// and 32 rounded `i8`).
    ///
    /// # Panics
    /// When `data` does not match `dims` or rows are not a multiple of 32 long.
    #[must_use]
    pub fn tensor_q8_0(mut self, name: &str, dims: &[u64], data: &[f32]) -> Self {
        assert_eq!(count(dims), data.len(), "tensor `{name}`: shape and data");
        assert!(
            dims.first()
                .is_some_and(|&n| (n as usize).is_multiple_of(Q8_0_BLOCK)),
            "tensor `{name}`: Q8_0 rows are whole blocks of {Q8_0_BLOCK}"
        );
        let mut bytes = Vec::with_capacity(data.len() / Q8_0_BLOCK * 34);
        for block in data.chunks(Q8_0_BLOCK) {
            let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            bytes.extend(f16_bits(d).to_le_bytes());
            // `as` saturates; the rounded values lie in -127..=127.
            bytes.extend(block.iter().map(|v| (v * id).round() as i8 as u8));
        }
        self.tensors.push(Tensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty: GGML_Q8_0,
            data: bytes,
        });
        self
    }

    /// The file's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        let n = self.declared_tensors.unwrap_or(self.tensors.len() as u64);
        out.extend(n.to_le_bytes());
        out.extend(self.kv_count.to_le_bytes());
        out.extend(&self.kvs);
        let mut offset = 0usize;
        for t in &self.tensors {
            raw_string(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.ty.to_le_bytes());
            out.extend((offset as u64).to_le_bytes());
            offset = aligned(offset + t.data.len());
        }
        if self.tensors.is_empty() {
            return out;
        }
        out.resize(aligned(out.len()), 0);
        for t in &self.tensors {
            out.extend(&t.data);
            out.resize(aligned(out.len()), 0);
        }
        out
    }

    /// Write the file to `path`, creating its folder.
    ///
    /// # Panics
    /// When the file cannot be written (a test setup failure).
    pub fn write(&self, path: &Path) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the GGUF's folder");
        }
        std::fs::write(path, self.bytes()).expect("write the GGUF");
    }
}

fn count(dims: &[u64]) -> usize {
    dims.iter().product::<u64>() as usize
}

fn aligned(n: usize) -> usize {
    n.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// IEEE half-precision bits of `v`, rounded to nearest even (normal and
/// subnormal range; larger values become infinity).
fn f16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = bits & 0x007f_ffff;
    if exp >= 31 {
        return sign | 0x7c00;
    }
    if exp <= 0 {
        if exp < -10 {
            return sign;
        }
        let m = mant | 0x0080_0000;
        let shift = (14 - exp) as u32;
        let half = m >> shift;
        let rest = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = u32::from(rest > mid || (rest == mid && half & 1 == 1));
        return sign | (half + round) as u16;
    }
    let half = ((exp as u32) << 10) | (mant >> 13);
    let rest = mant & 0x1fff;
    let round = u32::from(rest > 0x1000 || (rest == 0x1000 && half & 1 == 1));
    sign | (half + round) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_bits_round_like_ieee() {
        assert_eq!(f16_bits(0.0), 0);
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(-2.0), 0xc000);
        assert_eq!(f16_bits(65504.0), 0x7bff);
        assert_eq!(f16_bits(1e6), 0x7c00);
        assert_eq!(f16_bits(6.103_515_6e-5), 0x0400, "smallest normal");
        assert_eq!(f16_bits(5.960_464_5e-8), 0x0001, "smallest subnormal");
        // 1 + 2^-11 is halfway between 1 and the next half: ties to even.
        assert_eq!(f16_bits(1.0 + 1.0 / 2048.0), 0x3c00);
    }

    #[test]
    fn tensors_are_aligned_after_the_metadata() {
        let bytes = GgufWriter::new()
            .string("general.architecture", "llama")
            .tensor_f32("a", &[3], &[1.0, 2.0, 3.0])
            .tensor_q8_0("b", &[32], &[0.5; 32])
            .bytes();
        assert_eq!(bytes.len() % ALIGNMENT, 0);
        // 12 bytes of F32 padded to 32, then one 34-byte Q8_0 block padded to 64.
        let data_start = bytes.len() - 96;
        assert_eq!(&bytes[data_start..data_start + 4], &1.0f32.to_le_bytes());
        let q8 = &bytes[data_start + ALIGNMENT..];
        assert_eq!(u16::from_le_bytes([q8[0], q8[1]]), f16_bits(0.5 / 127.0));
        assert_eq!(q8[2], 127);
    }
}
