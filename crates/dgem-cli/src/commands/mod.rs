//! One module per subcommand.

pub mod bench;
pub mod decide;
pub mod output;
pub mod model;
pub mod render;
