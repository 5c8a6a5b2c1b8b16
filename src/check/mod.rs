//! Checks: the plain CPU reference of every op (`oracle`), the kernel self-checks shared by native
//! tests, browser tests and the demo ([`selftest`]), and the tiny random-weight test model
//! (`testmodel`, test-support only).

pub mod oracle;
pub mod selftest;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod testmodel;
