//! framehop as a differential oracle (spec A, B.3.5): on the same synthesized modules,
//! framehop and this crate agree on the caller's RIP, RSP and RBP, except for the documented
//! divergences of `fixtures::unwind_oracle::expected_divergence`.

use fixtures::unwind_oracle::{check, Format, BASE};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn framehop_agrees_except_where_documented(shape in fixtures::strategies::function_shape()) {
        for format in Format::ALL {
            let outcome = check(&shape, BASE, format).map_err(TestCaseError::fail)?;
            prop_assert!(outcome.framehop_unexpected.is_empty(), "{:?} in {:?}", outcome.framehop_unexpected, shape);
        }
    }
}
