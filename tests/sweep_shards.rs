//! A sweep split over machines: shards merged are byte for byte what one run of the whole
//! grid writes; a missing, repeated or foreign shard is refused; the Slurm and Kubernetes
//! files run one shard per task.

mod common;

use std::path::Path;

use common::servesim_in;

const GRID: [&str; 8] = [
    "--vary",
    "workload.arrival.rate_per_s=2..20:5",
    "--vary",
    "scheduler.max_num_seqs=64,256",
    "--set",
    "measure.min_requests=500",
    "--set",
    "measure.max_requests=2000",
];

fn sweep(dir: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["sweep"];
    args.extend(GRID);
    args.extend(extra);
    let (code, _, err) = servesim_in(dir, &args);
    (code, err)
}

#[test]
fn four_shards_merged_are_byte_identical_to_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (code, err) = sweep(d, &["--out", "whole", "--format", "csv"]);
    assert_eq!(code, 0, "{err}");
    for k in 0..4 {
        let shard = format!("{k}/4");
        let out = format!("s{k}");
        let (code, err) = sweep(d, &["--shard", &shard, "--out", &out, "--format", "csv"]);
        assert_eq!(code, 0, "{err}");
        assert!(d.join(&out).join("shard.json").exists());
    }
    let (code, _, err) = servesim_in(
        d,
        &[
            "sweep", "--merge", "s0", "s1", "s2", "s3", "--out", "merged", "--format", "csv",
        ],
    );
    assert_eq!(code, 0, "{err}");
    for f in ["sweep.json", "sweep.csv"] {
        let whole = std::fs::read(d.join("whole").join(f)).unwrap();
        let merged = std::fs::read(d.join("merged").join(f)).unwrap();
        assert!(
            whole == merged,
            "{f} differs between one run and four merged shards"
        );
    }
    // The order of the folders does not matter.
    let (code, _, err) = servesim_in(
        d,
        &[
            "sweep", "--merge", "s3", "s1", "s0", "s2", "--out", "merged2", "--format", "csv",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read(d.join("merged2/sweep.csv")).unwrap(),
        std::fs::read(d.join("whole/sweep.csv")).unwrap()
    );

    // A missing shard, a repeated one, and a shard of another sweep are refused.
    for (dirs, why) in [
        (vec!["s0", "s1", "s3"], "missing shard(s) 2/4"),
        (vec!["s0", "s1", "s1", "s2", "s3"], "given twice"),
    ] {
        let mut args = vec!["sweep", "--merge"];
        args.extend(dirs);
        args.extend(["--out", "bad"]);
        let (code, _, err) = servesim_in(d, &args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(why), "{err}");
    }
    let (code, err) = sweep(
        d,
        &[
            "--set", "seed=9", "--shard", "2/4", "--out", "other", "--format", "csv",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = servesim_in(
        d,
        &[
            "sweep", "--merge", "s0", "s1", "other", "s3", "--out", "bad", "--format", "csv",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another sweep"), "{err}");
}

#[test]
fn the_cluster_files_run_one_shard_per_task_and_say_how_to_merge() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let slurm = std::fs::read_to_string(root.join("scripts/cluster/sweep.sbatch")).unwrap();
    assert!(slurm.contains("#SBATCH --array="));
    assert!(slurm.contains("--shard \"$k/$n\""));
    assert!(slurm.contains("SLURM_ARRAY_TASK_ID"));
    assert!(slurm.contains("servesim sweep --merge"));
    let k8s = std::fs::read_to_string(root.join("scripts/cluster/sweep-job.yaml")).unwrap();
    assert!(k8s.contains("completionMode: Indexed"));
    assert!(k8s.contains("--shard \"${JOB_COMPLETION_INDEX}/16\""));
    assert!(k8s.contains("completions: 16"));
    assert!(k8s.contains("servesim sweep --merge"));
    // The grid both files sweep is a valid one: its first shard of 16 runs here.
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = servesim_in(
        root,
        &[
            "sweep",
            "scenarios/chat-slo.toml",
            "--vary",
            "workload.arrival.rate_per_s=5..60:12",
            "--vary",
            "scheduler.max_num_seqs=64,128,256",
            "--vary",
            "deployment.gpu=h100-sxm,h200-sxm",
            "--set",
            "measure.min_requests=300",
            "--set",
            "measure.max_requests=300",
            "--shard",
            "15/16",
            "--out",
            dir.path().join("s").to_str().unwrap(),
            "--format",
            "csv",
        ],
    );
    assert_eq!(code, 0, "{err}");
}
