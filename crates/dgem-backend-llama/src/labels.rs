//! Label-row readout: a slot's label logits from the final hidden state and
//! the label tokens' rows of the output matrix, without the output head.
//!
//! A causal LM's logit for token `t` at a row is `h · W[t]` (softcapped when
//! the model says so), where `h` is the final hidden state (after the last
//! RMS norm, `n_embd` floats) and `W` the output matrix — for Gemma 3 the
//! tied token embedding, 262,144 rows of 640 in Q8_0 (178 MB). llama.cpp
//! multiplies `h` by all of `W` for every output row; a slot needs the few
//! rows of its labels. So:
//!
//! - [`HiddenCapture`] is llama.cpp's graph evaluation callback (`cb_eval`):
//!   it copies the graph node named `result_norm` (the final hidden states of
//!   the batch's output rows, `[n_embd, n_outputs]` f32, in batch order per
//!   ubatch) and, unless the full head is wanted for this decode, stops the
//!   graph there — on the CPU backend the graph is one split, so the output
//!   head is not computed at all (llama.cpp then copies an uncomputed logits
//!   buffer, which nobody reads);
//! - [`OutputRows`] reads the label rows from the GGUF file (ggml's own GGUF
//!   reader for the tensor's offset and type, ggml's dequantizer for its
//!   blocks), once per token id, and takes the dot products in `f64`, adding
//!   the output bias (`output.bias`, Qwen 2 and Phi-2 style heads) and the
//!   final softcap as the model has them.
//!
//! Other architectures may treat the head's product further (a logit scale,
//! an extra mask) or name no `result_norm`; the model thread checks this readout
//! against llama.cpp's own logits once at load and reads from the head when
//! they disagree (`crate::kv_context`, [`crate::Readout`]).
//!
//! The numbers are not bit-equal to llama.cpp's logits: ggml's Q8_0 matmul
//! also quantizes `h` to 8 bits per block before its integer dot products,
//! this readout multiplies the dequantized weights by the unquantized `h`.
//! Both are deterministic; this one is used for a slot's label
//! probabilities in every mode, so asking for the full vocabulary (which
//! runs the head) never moves them.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use dgem_backend::BackendError;
use dgem_core::tokenizer::TokenId;
use llama_cpp_sys_2 as sys;

use crate::LlamaError;

/// Name llama.cpp gives the final hidden states of the output rows (after
/// the last norm, before the output head) in every decoder graph it builds.
const HIDDEN_NODE: &[u8] = b"result_norm";
/// Rows kept dequantized; past this the cache starts over (a row is
/// `n_embd` f32: 2.5 KB for Gemma 3 270M, so 8 MB at most).
const MAX_CACHED_ROWS: usize = 3276;

/// How the embedded backend reads a slot's label logits, as decided at load
/// ([`crate::LlamaBackend::readout`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Readout {
    /// From the final hidden state and the label tokens' rows of the output
    /// matrix; the head runs only for slots that ask for the full vocabulary.
    /// Checked at load against llama.cpp's own logits on a short decode.
    LabelRows {
        /// Largest difference from llama.cpp's logits seen in that check
        /// (quantized heads: ggml also quantizes the hidden state).
        max_error: f64,
        /// Largest |logit| among those compared (the scale of `max_error`).
        largest_logit: f64,
    },
    /// From llama.cpp's logits: the output head runs at every decode. Used
    /// when the label rows did not reproduce the head at load (a logit scale
    /// or mask they do not know, or no `result_norm` node in the graph).
    FullHead {
        /// What the check found.
        reason: String,
    },
}

/// What the graph callback writes during one `llama_decode` (see the module
/// docs). Owned by the [`crate::kv_context`] context through a raw pointer that llama.cpp holds as
/// its `cb_eval_user_data`; touched only on the model thread.
#[derive(Debug, Default)]
pub(crate) struct HiddenCapture {
    /// Width of a hidden state (`n_embd`).
    pub n_embd: usize,
    /// Let the graph go on to the output head (full-vocabulary logits).
    pub full_head: bool,
    /// Hidden states of the output rows decoded since the last clear, one
    /// after another (`n_embd` floats each), in batch order.
    pub rows: Vec<f32>,
    /// A `result_norm` node did not look like `[n_embd, n] f32`, contiguous:
    /// the capture is unusable for this decode.
    pub bad_shape: bool,
}

impl HiddenCapture {
    /// Forget the last decode's rows and set whether the next one runs the head.
    pub fn start(&mut self, full_head: bool) {
        self.rows.clear();
        self.full_head = full_head;
        self.bad_shape = false;
    }

    /// The hidden state of the `i`-th output row of the last decode.
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        if self.bad_shape {
            return None;
        }
        let start = i.checked_mul(self.n_embd)?;
        self.rows.get(start..start.checked_add(self.n_embd)?)
    }
}

/// The context's [`HiddenCapture`], on the heap at a fixed address that
/// llama.cpp holds as its `cb_eval_user_data` for the life of the context.
///
/// Owns the allocation (`Box::into_raw` / `Box::from_raw`); must outlive the
/// context it was [`Self::register`]ed with (the model thread drops the context
/// first: it is declared before this handle).
#[derive(Debug)]
pub(crate) struct CaptureHandle(*mut HiddenCapture);

impl CaptureHandle {
    /// A new capture for hidden states `n_embd` floats wide.
    pub fn new(n_embd: usize) -> Self {
        Self(Box::into_raw(Box::new(HiddenCapture {
            n_embd,
            ..HiddenCapture::default()
        })))
    }

    /// `params` with [`on_graph_node`] as the graph callback, writing here.
    pub fn register(
        &self,
        params: llama_cpp_2::context::params::LlamaContextParams,
    ) -> llama_cpp_2::context::params::LlamaContextParams {
        // SAFETY: the pointer stays valid until `Drop`, which the model thread runs
        // after dropping the context (field order); it is only dereferenced in
        // Rust through `get`, which needs `&mut self`, never during a decode.
        unsafe { params.with_cb_eval(Some(on_graph_node), self.0.cast()) }
    }

    /// The capture, between decodes.
    pub fn get(&mut self) -> &mut HiddenCapture {
        // SAFETY: valid from `new` to `Drop`; llama.cpp writes it only inside
        // `llama_decode`, which the model thread never runs while this borrow lives.
        unsafe { &mut *self.0 }
    }
}

impl Drop for CaptureHandle {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in `new`, freed once, here.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// llama.cpp's `cb_eval`: see [`HiddenCapture`]. Never panics (it is called
/// from C).
///
/// # Safety
/// `user_data` is the `*mut HiddenCapture` the context registered, alive and
/// not otherwise borrowed while `llama_decode` runs; `t` is a valid tensor.
pub(crate) unsafe extern "C" fn on_graph_node(
    t: *mut sys::ggml_tensor,
    ask: bool,
    user_data: *mut c_void,
) -> bool {
    if t.is_null() || user_data.is_null() {
        return true;
    }
    // SAFETY: ggml passes a live tensor; its name is a NUL-terminated array.
    let name = unsafe { CStr::from_ptr((*t).name.as_ptr()) };
    if name.to_bytes() != HIDDEN_NODE {
        // Not wanted: ggml computes on to the next node we ask for.
        return false;
    }
    if ask {
        return true;
    }
    // SAFETY: the context's capture, not borrowed during a decode (contract).
    let capture = unsafe { &mut *user_data.cast::<HiddenCapture>() };
    // SAFETY: `t` is computed (ask == false) and lives until we return.
    let (ty, ne0, ne1, contiguous, bytes) = unsafe {
        (
            (*t).type_,
            (*t).ne[0],
            (*t).ne[1],
            sys::ggml_is_contiguous(t),
            sys::ggml_nbytes(t),
        )
    };
    let n = usize::try_from(ne1).unwrap_or(0);
    let width_ok = usize::try_from(ne0).is_ok_and(|w| w == capture.n_embd);
    if ty != sys::GGML_TYPE_F32 || !width_ok || !contiguous || bytes != n * capture.n_embd * 4 {
        capture.bad_shape = true;
        return true;
    }
    let at = capture.rows.len();
    capture.rows.resize(at + n * capture.n_embd, 0.0);
    // SAFETY: the destination holds exactly `bytes` bytes past `at`; ggml
    // copies from the tensor's backend buffer (host memory on the CPU).
    unsafe {
        sys::ggml_backend_tensor_get(
            t,
            capture.rows.as_mut_ptr().add(at).cast::<c_void>(),
            0,
            bytes,
        );
    }
    capture.full_head
}

/// The output matrix of a GGUF model, row by row, for label logits.
#[derive(Debug)]
pub(crate) struct OutputRows {
    file: File,
    /// Byte offset of row 0 in the file.
    base: u64,
    row_bytes: usize,
    n_embd: usize,
    n_rows: usize,
    to_float: ToFloat,
    /// Final logit softcap `c` (`logit = c · tanh(logit / c)`), 0 when off.
    softcap: f64,
    /// `output.bias`, one value per row, when the model has one.
    bias: Option<Vec<f32>>,
    cache: HashMap<TokenId, Box<[f32]>>,
}

/// A GGUF file opened by ggml's reader (metadata only), freed on drop.
struct Gguf(*mut sys::gguf_context);

impl Drop for Gguf {
    fn drop(&mut self) {
        // SAFETY: made by gguf_init_from_file, freed once.
        unsafe { sys::gguf_free(self.0) }
    }
}

impl Gguf {
    fn key(&self, name: &str) -> Option<i64> {
        let c = CString::new(name).ok()?;
        // SAFETY: live context, NUL-terminated key.
        let id = unsafe { sys::gguf_find_key(self.0, c.as_ptr()) };
        (id >= 0).then_some(id)
    }

    fn str_val(&self, name: &str) -> Option<String> {
        let id = self.key(name)?;
        // SAFETY: live context, valid key id; the type is checked first.
        unsafe {
            if sys::gguf_get_kv_type(self.0, id) != sys::GGUF_TYPE_STRING {
                return None;
            }
            let s = sys::gguf_get_val_str(self.0, id);
            (!s.is_null()).then(|| CStr::from_ptr(s).to_string_lossy().into_owned())
        }
    }

    fn f32_val(&self, name: &str) -> Option<f32> {
        let id = self.key(name)?;
        // SAFETY: live context, valid key id; the type is checked first.
        unsafe {
            (sys::gguf_get_kv_type(self.0, id) == sys::GGUF_TYPE_FLOAT32)
                .then(|| sys::gguf_get_val_f32(self.0, id))
        }
    }

    fn tensor(&self, name: &str) -> Option<i64> {
        let c = CString::new(name).ok()?;
        // SAFETY: live context, NUL-terminated name.
        let id = unsafe { sys::gguf_find_tensor(self.0, c.as_ptr()) };
        (id >= 0).then_some(id)
    }
}

impl OutputRows {
    /// Find the output matrix of the model at `path` (`output.weight`, or the
    /// tied `token_embd.weight`), `n_rows` rows of `n_embd`.
    ///
    /// # Errors
    /// [`LlamaError::Unsupported`] when the file cannot be read as GGUF, has no
    /// such tensor, its size does not match `n_rows × n_embd` of its type, or
    /// ggml cannot dequantize that type.
    pub fn open(path: &Path, n_embd: usize, n_rows: usize) -> Result<Self, LlamaError> {
        let err = |what: String| {
            LlamaError::Unsupported(format!("{} (label-row readout): {what}", path.display()))
        };
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| err("path holds a NUL byte".into()))?;
        let params = sys::gguf_init_params {
            no_alloc: true,
            ctx: std::ptr::null_mut(),
        };
        // SAFETY: NUL-terminated path; metadata only (no_alloc, no ggml ctx).
        let ctx = unsafe { sys::gguf_init_from_file(cpath.as_ptr(), params) };
        if ctx.is_null() {
            return Err(err("ggml could not read it as GGUF".into()));
        }
        let gguf = Gguf(ctx);
        let id = gguf
            .tensor("output.weight")
            .or_else(|| gguf.tensor("token_embd.weight"))
            .ok_or_else(|| err("no output.weight or token_embd.weight tensor".into()))?;
        // SAFETY: live context and a tensor id it returned.
        let (ty, offset, size, data) = unsafe {
            (
                sys::gguf_get_tensor_type(gguf.0, id),
                sys::gguf_get_tensor_offset(gguf.0, id),
                sys::gguf_get_tensor_size(gguf.0, id),
                sys::gguf_get_data_offset(gguf.0),
            )
        };
        let width = i64::try_from(n_embd).map_err(|_| err(format!("n_embd {n_embd}")))?;
        // SAFETY: pure functions of the type.
        let (row_bytes, traits) =
            unsafe { (sys::ggml_row_size(ty, width), sys::ggml_get_type_traits(ty)) };
        if row_bytes == 0 || row_bytes.checked_mul(n_rows) != Some(size) {
            return Err(err(format!(
                "output matrix is {size} bytes, expected {n_rows} rows of {row_bytes}"
            )));
        }
        let to_float = ToFloat::of(ty, traits)
            .ok_or_else(|| err(format!("ggml cannot dequantize tensor type {ty}")))?;
        let arch = gguf.str_val("general.architecture").unwrap_or_default();
        let softcap = gguf
            .f32_val(&format!("{arch}.final_logit_softcapping"))
            .map_or(0.0, f64::from);
        let file = File::open(path).map_err(|e| err(e.to_string()))?;
        let bias = match gguf.tensor("output.bias") {
            Some(b) => Some(read_vector(&gguf, &file, b, n_rows).map_err(err)?),
            None => None,
        };
        Ok(Self {
            file,
            base: u64::try_from(data + offset).map_err(|_| err("offset".into()))?,
            row_bytes,
            n_embd,
            n_rows,
            to_float,
            softcap,
            bias,
            cache: HashMap::new(),
        })
    }

    /// Number of rows (the vocabulary size).
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Row `id`, dequantized (cached).
    fn row(&mut self, id: TokenId) -> Result<&[f32], BackendError> {
        if !self.cache.contains_key(&id) {
            let i = usize::try_from(id).unwrap_or(usize::MAX);
            if i >= self.n_rows {
                return Err(BackendError::Model(format!(
                    "token id {id} has no output row"
                )));
            }
            let mut raw = vec![0u8; self.row_bytes];
            let at = self.base + (i * self.row_bytes) as u64;
            self.file
                .read_exact_at(&mut raw, at)
                .map_err(|e| BackendError::Model(format!("reading output row {id}: {e}")))?;
            let mut row = vec![0f32; self.n_embd].into_boxed_slice();
            // `raw` holds one row of `n_embd` values of the tensor's type
            // (checked against the tensor size at open); `row` has room for
            // `n_embd` floats.
            self.to_float.convert(&raw, &mut row);
            if self.cache.len() >= MAX_CACHED_ROWS {
                self.cache.clear();
            }
            self.cache.insert(id, row);
        }
        self.cache
            .get(&id)
            .map(|r| &r[..])
            .ok_or_else(|| BackendError::Model("output row cache".into()))
    }

    /// The logit of token `id` at a row whose final hidden state is `hidden`:
    /// `h · W[id]` in `f64`, softcapped as the model says. `None` for an id
    /// past the vocabulary.
    pub fn logit(&mut self, hidden: &[f32], id: TokenId) -> Result<Option<f64>, BackendError> {
        if usize::try_from(id).map_or(true, |i| i >= self.n_rows) {
            return Ok(None);
        }
        let softcap = self.softcap;
        let bias = self
            .bias
            .as_ref()
            .and_then(|b| b.get(id as usize))
            .map_or(0.0, |&b| f64::from(b));
        let row = self.row(id)?;
        let dot: f64 = row
            .iter()
            .zip(hidden)
            .map(|(&w, &h)| f64::from(w) * f64::from(h))
            .sum::<f64>()
            + bias;
        Ok(Some(if softcap > 0.0 {
            softcap * (dot / softcap).tanh()
        } else {
            dot
        }))
    }
}

/// Tensor `id` of `gguf` (in `file`), a vector of `n` values of any type
/// ggml dequantizes, as `f32`.
fn read_vector(gguf: &Gguf, file: &File, id: i64, n: usize) -> Result<Vec<f32>, String> {
    // SAFETY: live context and a tensor id it returned.
    let (ty, offset, size, data) = unsafe {
        (
            sys::gguf_get_tensor_type(gguf.0, id),
            sys::gguf_get_tensor_offset(gguf.0, id),
            sys::gguf_get_tensor_size(gguf.0, id),
            sys::gguf_get_data_offset(gguf.0),
        )
    };
    let len = i64::try_from(n).map_err(|_| format!("bias of {n} values"))?;
    // SAFETY: pure functions of the type.
    let (bytes, traits) = unsafe { (sys::ggml_row_size(ty, len), sys::ggml_get_type_traits(ty)) };
    if bytes == 0 || bytes != size {
        return Err(format!(
            "output bias is {size} bytes, expected {n} values ({bytes} bytes)"
        ));
    }
    let to_float =
        ToFloat::of(ty, traits).ok_or_else(|| format!("ggml cannot dequantize bias type {ty}"))?;
    let mut raw = vec![0u8; size];
    let at = u64::try_from(data + offset).map_err(|_| "bias offset".to_owned())?;
    file.read_exact_at(&mut raw, at)
        .map_err(|e| format!("reading the output bias: {e}"))?;
    let mut out = vec![0f32; n];
    // `raw` holds `n` values of type `ty` (checked against the tensor size
    // above); `out` has room for `n` floats.
    to_float.convert(&raw, &mut out);
    Ok(out)
}

/// How the values of one tensor type become `f32`.
#[derive(Debug, Clone, Copy)]
enum ToFloat {
    /// Already `f32` (ggml has no `to_float` for its own type).
    F32,
    /// ggml's dequantizer of the type.
    Ggml(unsafe extern "C" fn(*const c_void, *mut f32, i64)),
}

impl ToFloat {
    /// The conversion of ggml type `ty` with type traits `traits`, if any.
    fn of(ty: sys::ggml_type, traits: *const sys::ggml_type_traits) -> Option<Self> {
        if ty == sys::GGML_TYPE_F32 {
            return Some(Self::F32);
        }
        // SAFETY: ggml's static table, valid for the process.
        unsafe { traits.as_ref() }
            .and_then(|t| t.to_float)
            .map(Self::Ggml)
    }

    /// Convert `raw` (whole values of the type) into `out`, one `f32` per
    /// value; `raw` must hold `out.len()` values.
    fn convert(self, raw: &[u8], out: &mut [f32]) {
        match self {
            Self::F32 => {
                for (v, b) in out.iter_mut().zip(raw.chunks_exact(4)) {
                    *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Self::Ggml(f) => {
                let n = i64::try_from(out.len()).unwrap_or(0);
                // SAFETY: `raw` holds `out.len()` values of the type this
                // dequantizer belongs to (the callers check the tensor size),
                // and `out` has room for as many floats.
                unsafe { f(raw.as_ptr().cast(), out.as_mut_ptr(), n) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_rows_are_n_embd_wide_and_unusable_after_a_bad_shape() {
        let mut c = HiddenCapture {
            n_embd: 2,
            ..HiddenCapture::default()
        };
        c.start(false);
        c.rows.extend([1.0, 2.0, 3.0, 4.0]);
        assert_eq!(c.row(1), Some(&[3.0f32, 4.0][..]));
        assert_eq!(c.row(2), None);
        c.bad_shape = true;
        assert_eq!(c.row(0), None);
        c.start(true);
        assert!(c.rows.is_empty() && c.full_head && !c.bad_shape);
    }
}
