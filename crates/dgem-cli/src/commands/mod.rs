//! One module per subcommand; those of an optional feature (see the
//! crate's `[features]`) only in a build that has it.

pub mod after;
#[cfg(feature = "bench")]
pub mod batch;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "bench")]
pub mod bench_suites;
#[cfg(feature = "bench")]
pub mod calibrate;
pub mod decide;
#[cfg(feature = "gateway")]
pub mod gateway;
#[cfg(all(unix, feature = "embedded"))]
pub mod host;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod model;
pub mod output;
#[cfg(feature = "bench")]
pub mod plan;
#[cfg(feature = "bench")]
pub mod proxy;
#[cfg(feature = "bench")]
mod proxy_load;
pub mod render;
pub mod serve;
#[cfg(all(feature = "bench", feature = "embedded"))]
pub mod speed;
pub mod stage;
pub mod templates;
