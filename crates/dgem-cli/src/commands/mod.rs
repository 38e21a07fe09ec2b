//! One module per subcommand.

pub mod after;
pub mod bench;
pub mod bench_suites;
pub mod calibrate;
pub mod decide;
pub mod gateway;
pub mod mcp;
pub mod model;
pub mod output;
pub mod plan;
pub mod render;
pub mod serve;
pub mod speed;
pub mod stage;
pub mod templates;
