//! The H100 profile's per-operator predictions against vidur's measured H100 operators
//! (calibration/reference/h100-operators.csv). Measured with
//! `servesim validate-kernels --gpu h100-sxm --measurements calibration/reference/h100-operators.csv`:
//! GEMM median |error| 4.2% over 48 rows (docs/model.md). The bound is 15%.

use servesim::calibrate::measurement::read_measurements;
use servesim::calibrate::validate::validate;
use servesim::gpu::GpuProfile;

#[test]
fn gemm_predictions_match_measured_h100_operators() {
    let rows = read_measurements(std::path::Path::new(
        "calibration/reference/h100-operators.csv",
    ))
    .unwrap();
    let gpu = GpuProfile::load("h100-sxm").unwrap();
    let v = validate(&gpu, &rows);
    let gemm = v
        .classes
        .iter()
        .find(|c| c.class.name() == "gemm")
        .expect("the reference file has GEMM rows");
    assert_eq!(gemm.rows, 48);
    assert!(
        gemm.median_abs_error <= 0.06,
        "GEMM median |error| {:.3}",
        gemm.median_abs_error
    );
    assert!(gemm.median_abs_error <= 0.15);
    assert!(gemm.bias.abs() <= 0.05, "GEMM bias {:.3}", gemm.bias);
}
