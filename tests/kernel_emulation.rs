//! The paged decode-attention kernel (src/calibrate/kernels/attention.cu), unchanged, run on
//! the CPU through a small CUDA stand-in (tests/cuda_emu/) and checked against the CPU
//! reference the GPU run is checked against (`AttentionCase::check`): with one split, with a
//! split per KV block (a 1-token sequence then has empty splits), and with uneven splits. It
//! checks the kernel's indexing and arithmetic without a GPU; speed and the GPU memory model
//! are for `servesim calibrate --check` on a device. Needs a C++20 compiler (`$CXX`, else
//! `g++`); without one it skips with a message, and fails in CI (`SERVESIM_CI`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use servesim::calibrate::kernels::{AttentionCase, SplitPlan};

fn compiler() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let ok = Command::new(&cxx)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some(cxx)
}

fn build(cxx: &str, dir: &Path, head_dim: u64, group: u64) -> PathBuf {
    let exe = dir.join(format!("run_attention_{head_dim}_{group}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cuda_emu/run_attention.cpp");
    let out = Command::new(cxx)
        .args(["-std=c++20", "-O1", "-pthread", "-Wall", "-Werror"])
        .arg(format!("-DHEAD_DIM={head_dim}"))
        .arg(format!("-DGROUP={group}"))
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("the C++ compiler runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn run(exe: &Path, dir: &Path, case: &AttentionCase, plan: SplitPlan) -> Vec<f32> {
    let mut b = Vec::new();
    let num_blocks = case.k_cache.len() as u64 / (case.kv_heads * 16 * case.head_dim);
    for x in [
        case.batch(),
        case.kv_heads,
        case.max_blocks,
        num_blocks,
        plan.splits,
        plan.blocks_per_split,
    ] {
        b.extend((x as u32).to_le_bytes());
    }
    b.extend(case.scale().to_le_bytes());
    for v in case.q.iter().chain(&case.k_cache).chain(&case.v_cache) {
        b.extend(v.to_le_bytes());
    }
    for v in case.block_table.iter().chain(&case.context_lens) {
        b.extend(v.to_le_bytes());
    }
    let (inp, outp) = (dir.join("case.bin"), dir.join("out.bin"));
    std::fs::write(&inp, b).unwrap();
    let o = Command::new(exe).arg(&inp).arg(&outp).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(&outp)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn attention_kernel_matches_the_cpu_reference_when_emulated() {
    let Some(cxx) = compiler() else {
        common::skip_or_fail("no C++ compiler (set CXX or install g++)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Head dims 64 / 128 / 256 (4 / 2 / 1 tokens per warp step), groups from 1 to the largest.
    for (head_dim, group) in [(64, 2), (128, 1), (128, 8), (256, 5)] {
        let exe = build(&cxx, dir.path(), head_dim, group);
        let case = AttentionCase::small(head_dim, group, 40 + head_dim + group);
        let mb = case.max_blocks; // 3 blocks: contexts 1, 17 and 45 tokens
        for plan in [
            SplitPlan {
                splits: 1,
                blocks_per_split: mb,
            },
            SplitPlan {
                splits: mb,
                blocks_per_split: 1,
            },
            SplitPlan {
                splits: 2,
                blocks_per_split: 2,
            },
        ] {
            let got = run(&exe, dir.path(), &case, plan);
            case.check(&got, &format!("emulated, {plan:?}"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // The comparison is not vacuous: with the last sequence's first block mapped to a
        // physical block no sequence uses, the kernel's output disagrees with the reference of
        // the original table (and agrees with that of the changed one).
        let mut moved = case.clone();
        let num_blocks = (case.k_cache.len() as u64 / (case.kv_heads * 16 * head_dim)) as i32;
        let unused = (0..num_blocks)
            .find(|b| !case.block_table.contains(b))
            .unwrap();
        moved.block_table[(2 * mb) as usize] = unused;
        let plan = SplitPlan {
            splits: 1,
            blocks_per_split: mb,
        };
        let got = run(&exe, dir.path(), &moved, plan);
        assert!(case.check(&got, "moved").is_err());
        moved.check(&got, "moved").unwrap();
    }
}

#[test]
fn without_a_cpp_compiler_the_emulation_test_fails_in_ci() {
    let (passed, out) = common::rerun_in_ci_without_tools(
        "attention_kernel_matches_the_cpu_reference_when_emulated",
        &[("CXX", "/nonexistent/c++")],
    );
    assert!(!passed && out.contains(common::CI_VAR), "{out}");
}
