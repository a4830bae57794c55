//! Lock cases. Each takes the suite and panics with a message on failure;
//! the cases are grouped by concern in the submodules.

pub use super::reserved_cases::reserved_keys_are_refused;
pub use super::reserved_cases::reserved_keys_are_refused_by_renew_many;

mod cancellation;
mod exclusion;
mod lease;
mod outside_runtime;
mod unrenewed;

pub use self::cancellation::*;
pub use self::exclusion::*;
pub use self::lease::*;
pub use self::outside_runtime::*;
pub use self::unrenewed::*;
