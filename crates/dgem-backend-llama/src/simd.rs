//! Runtime check of the SIMD instructions ggml was compiled with against the CPU
//! the process runs on.
//!
//! ggml's CPU kernels are compiled for a fixed instruction set. The workspace's
//! `.cargo/config.toml` pins it (`GGML_AVX`, `GGML_AVX2`, `GGML_FMA`,
//! `GGML_F16C`, `GGML_SSE42`, `GGML_BMI2` = `ON`, which `llama-cpp-sys-2`
//! forwards to CMake) and `scripts/simd-env` narrows it to what the build
//! machine's CPU has; without a pin, ggml's own CMake turns every one of them
//! off when `SOURCE_DATE_EPOCH` is set or when cross-compiling, a build measured
//! ~20× slower (98–108 ms per token on Gemma 3 270M). Two mismatches matter:
//! - the build uses an instruction the CPU lacks: the first kernel would die
//!   with SIGILL, so loading **refuses** with [`LlamaError::Unsupported`] naming
//!   the instruction and the rebuild that fixes it;
//! - the CPU has AVX2/FMA/F16C and the build does not use them: it works, slowly,
//!   so loading **warns** (`tracing` at `warn`, shown by the CLI by default).
//!
//! The `ggml_cpu_has_*` functions report compile-time flags (`#if defined(__AVX2__)`
//! in ggml-cpu), so calling them before `llama_backend_init` runs no SIMD code.
#![allow(unsafe_code)]

use crate::LlamaError;

/// One x86 instruction-set extension: its name, whether this build of ggml uses
/// it, whether the CPU has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimdFeature {
    /// The name as ggml's CMake option spells it after `GGML_` (`AVX2`).
    pub name: &'static str,
    /// Compiled into ggml's CPU kernels.
    pub built: bool,
    /// Reported by the CPU (`cpuid`).
    pub cpu: bool,
}

/// The x86 extensions ggml's CPU backend is built with, against the CPU.
/// Empty on other architectures (their kernels are chosen by the target).
pub fn simd_features() -> Vec<SimdFeature> {
    #[cfg(target_arch = "x86_64")]
    {
        use llama_cpp_sys_2 as sys;
        // SAFETY: each function only returns a constant decided at ggml's
        // compile time (`return 1` under `#if defined(__AVX2__)`, else 0); it
        // takes no arguments, touches no state and runs no SIMD instruction.
        let built = |f: unsafe extern "C" fn() -> std::os::raw::c_int| unsafe { f() } != 0;
        vec![
            SimdFeature {
                name: "AVX",
                built: built(sys::ggml_cpu_has_avx),
                cpu: std::is_x86_feature_detected!("avx"),
            },
            SimdFeature {
                name: "AVX2",
                built: built(sys::ggml_cpu_has_avx2),
                cpu: std::is_x86_feature_detected!("avx2"),
            },
            SimdFeature {
                name: "FMA",
                built: built(sys::ggml_cpu_has_fma),
                cpu: std::is_x86_feature_detected!("fma"),
            },
            SimdFeature {
                name: "F16C",
                built: built(sys::ggml_cpu_has_f16c),
                cpu: std::is_x86_feature_detected!("f16c"),
            },
            SimdFeature {
                name: "BMI2",
                built: built(sys::ggml_cpu_has_bmi2),
                cpu: std::is_x86_feature_detected!("bmi2"),
            },
            SimdFeature {
                name: "AVX512",
                built: built(sys::ggml_cpu_has_avx512),
                cpu: std::is_x86_feature_detected!("avx512f"),
            },
        ]
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}

/// What [`check`] found: the features the CPU has but the build leaves unused
/// (empty when the build matches the CPU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimdReport {
    /// Names of extensions the CPU offers and ggml was built without.
    pub unused: Vec<&'static str>,
}

/// Compare `features` (see [`simd_features`]).
///
/// # Errors
/// [`LlamaError::Unsupported`] when the build uses an extension the CPU lacks
/// (the kernels would crash with SIGILL), naming each one and the fix.
pub fn check(features: &[SimdFeature]) -> Result<SimdReport, LlamaError> {
    let missing: Vec<&str> = features
        .iter()
        .filter(|f| f.built && !f.cpu)
        .map(|f| f.name)
        .collect();
    if !missing.is_empty() {
        let off: Vec<String> = missing.iter().map(|m| format!("GGML_{m}=OFF")).collect();
        return Err(LlamaError::Unsupported(format!(
            "llama.cpp was built with {} but this CPU does not have {}: rebuild on this machine with `scripts/simd-env` (scripts/dgem and scripts/test use it) or with `{} cargo build`",
            missing.join(", "),
            if missing.len() == 1 { "it" } else { "them" },
            off.join(" ")
        )));
    }
    // AVX512 is left out of the pin on purpose (not every AVX2 machine has
    // it and the gain on this model is small), so only the AVX2 generation
    // counts as "unused".
    let unused = features
        .iter()
        .filter(|f| f.cpu && !f.built && f.name != "AVX512")
        .map(|f| f.name)
        .collect();
    Ok(SimdReport { unused })
}

/// [`check`] on this build and CPU, warning loudly about unused extensions.
pub(crate) fn check_this_cpu() -> Result<(), LlamaError> {
    let report = check(&simd_features())?;
    if !report.unused.is_empty() {
        let on: Vec<String> = report
            .unused
            .iter()
            .map(|m| format!("GGML_{m}=ON"))
            .collect();
        tracing::warn!(
            unused = ?report.unused,
            "llama.cpp was built without {} although this CPU has them: every token runs ~20x slower. Rebuild with `{} cargo build` (the repository's .cargo/config.toml pins them; something overrode it)",
            report.unused.join(", "),
            on.join(" ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &'static str, built: bool, cpu: bool) -> SimdFeature {
        SimdFeature { name, built, cpu }
    }

    #[test]
    fn a_build_using_what_the_cpu_lacks_is_refused_naming_the_fix() {
        let err = check(&[
            f("AVX", true, true),
            f("AVX2", true, false),
            f("FMA", true, false),
        ])
        .expect_err("must refuse");
        let msg = err.to_string();
        assert!(msg.contains("built with AVX2, FMA"), "{msg}");
        assert!(msg.contains("GGML_AVX2=OFF GGML_FMA=OFF"), "{msg}");
    }

    #[test]
    fn unused_extensions_are_reported_but_avx512_is_not_expected() {
        let r = check(&[
            f("AVX2", false, true),
            f("FMA", true, true),
            f("AVX512", false, true),
        ])
        .expect("usable");
        assert_eq!(r.unused, vec!["AVX2"]);
    }

    /// The pin in `.cargo/config.toml` reached this build: on an x86-64 CPU
    /// with AVX2 the kernels use it (a build without it is ~20x slower).
    #[test]
    fn this_build_uses_avx2_when_the_cpu_has_it() {
        for feat in simd_features() {
            if ["AVX", "AVX2", "FMA", "F16C"].contains(&feat.name) && feat.cpu {
                assert!(feat.built, "ggml built without {}: {feat:?}", feat.name);
            }
        }
        check(&simd_features()).expect("this build runs on this CPU");
    }
}
