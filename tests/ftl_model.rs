//! Model-based property test: random write / FUA write / read / trim /
//! write-zeroes / flush / range-operation vector sequences against an
//! in-memory model, with power cuts armed at random device commands and
//! remounts (see tests/common). Every block flushed before a cut reads back
//! exactly; any other block reads its old or one of its new contents and
//! nothing else; trims persist; reads between cuts return exactly the last
//! write; an acknowledged vector (clone, move, delete, merge, attributes)
//! survives a cut, one a cut interrupted shows whole or not at all;
//! immutable blocks refuse changes; non-persistent blocks read zeros after a
//! cut. proptest shrinks a failure to a minimal op sequence and stores its
//! seed in proptest-regressions/.

mod common;

use common::{Op, Rig};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let lba = 0u64..4096;
    let blocks = 1u32..9;
    prop_oneof![
        40 => (lba.clone(), blocks.clone()).prop_map(|(lba, blocks)| Op::Write { lba, blocks }),
        4 => lba.clone().prop_map(|lba| Op::Fua { lba }),
        5 => (lba.clone(), blocks.clone()).prop_map(|(lba, blocks)| Op::Trim { lba, blocks }),
        3 => (lba.clone(), blocks.clone()).prop_map(|(lba, blocks)| Op::Zeroes { lba, blocks }),
        8 => (lba, blocks).prop_map(|(lba, blocks)| Op::Read { lba, blocks }),
        6 => Just(Op::Flush),
        6 => any::<u64>().prop_map(|seed| Op::Vector { seed }),
        2 => (1u64..600).prop_map(|after_commands| Op::Cut { after_commands }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn ftl_matches_model_across_power_cuts(
        seed in any::<u64>(),
        oob in any::<bool>(),
        timing in any::<bool>(),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let mut rig = Rig::new(seed, oob, timing);
        for op in ops {
            rig.apply(op);
        }
        rig.finish();
    }
}
