//! Lock cases. Each takes the suite and panics with a message on failure;
//! the cases are grouped by concern in the submodules.

mod cancellation;
mod exclusion;
mod lease;
mod unrenewed;

pub use self::cancellation::*;
pub use self::exclusion::*;
pub use self::lease::*;
pub use self::unrenewed::*;
