//! GPU prices (calibration/pricing.toml, embedded) and the cost formulas.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::{self, Kind};
use crate::error::{Error, Result};

const PRICING_TOML: &str = include_str!("../../calibration/pricing.toml");

/// Hours in an average month (8760 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// Prices of one GPU type, $/GPU-hour.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuPrice {
    /// On-demand.
    pub on_demand: f64,
    /// Reserved (1-year class).
    pub reserved: Option<f64>,
    /// Spot / preemptible.
    pub spot: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PricingFile {
    gpus: BTreeMap<String, GpuPrice>,
}

/// Which price column to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PriceColumn {
    /// On-demand.
    #[default]
    OnDemand,
    /// Reserved.
    Reserved,
    /// Spot.
    Spot,
}

impl PriceColumn {
    /// The column's name, as the catalog and the scenario spell it.
    pub fn name(&self) -> &'static str {
        match self {
            PriceColumn::OnDemand => "on_demand",
            PriceColumn::Reserved => "reserved",
            PriceColumn::Spot => "spot",
        }
    }
}

impl std::str::FromStr for PriceColumn {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "on_demand" | "on-demand" => Ok(PriceColumn::OnDemand),
            "reserved" => Ok(PriceColumn::Reserved),
            "spot" => Ok(PriceColumn::Spot),
            _ => Err(format!(
                "unknown price column '{s}' (on_demand, reserved, spot)"
            )),
        }
    }
}

/// The embedded price catalog.
#[derive(Debug, Clone)]
pub struct PriceCatalog {
    gpus: BTreeMap<String, GpuPrice>,
}

impl PriceCatalog {
    /// Loads the embedded calibration/pricing.toml.
    pub fn embedded() -> Result<Self> {
        let f: PricingFile = toml::from_str(PRICING_TOML).map_err(|e| Error::Parse {
            path: "calibration/pricing.toml".into(),
            message: e.to_string(),
        })?;
        for (name, p) in &f.gpus {
            if catalog::canonical(Kind::Gpu, name) != Some(name.as_str()) {
                return Err(Error::config(
                    "calibration/pricing.toml",
                    format!("gpus.{name}"),
                    format!(
                        "not a GPU catalog name; known: {}",
                        crate::gpu::gpu_names().join(", ")
                    ),
                ));
            }
            for v in [Some(p.on_demand), p.reserved, p.spot]
                .into_iter()
                .flatten()
            {
                crate::scenario::check_gpu_price(v).map_err(|why| {
                    Error::config("calibration/pricing.toml", format!("gpus.{name}"), why)
                })?;
            }
        }
        Ok(PriceCatalog { gpus: f.gpus })
    }

    /// $/GPU-hour of `gpu` in `column` under a scenario's `[pricing]`:
    /// `price_usd_per_gpu_hour` for every GPU, else `pricing.gpus.<gpu>`, else the catalog.
    pub fn price_with(
        &self,
        overrides: &crate::scenario::PricingConfig,
        gpu: &str,
        column: PriceColumn,
    ) -> Result<f64> {
        match overrides
            .price_usd_per_gpu_hour
            .or_else(|| overrides.gpu_price(gpu))
        {
            Some(p) => Ok(p),
            None => self.price(gpu, column),
        }
    }

    /// $/GPU-hour of `gpu` (a catalog name or alias, [`crate::catalog`]) in `column` (falls
    /// back to on-demand when the column has no price for it).
    pub fn price(&self, gpu: &str, column: PriceColumn) -> Result<f64> {
        let name = catalog::canonical(Kind::Gpu, gpu).unwrap_or(gpu);
        let p = self.gpus.get(name).ok_or_else(|| Error::Unknown {
            kind: "price for gpu",
            name: gpu.to_string(),
            known: self.gpus.keys().cloned().collect::<Vec<_>>().join(", ")
                + " in calibration/pricing.toml (or set pricing.price_usd_per_gpu_hour, or --price)",
        })?;
        Ok(match column {
            PriceColumn::OnDemand => p.on_demand,
            PriceColumn::Reserved => p.reserved.unwrap_or(p.on_demand),
            PriceColumn::Spot => p.spot.unwrap_or(p.on_demand),
        })
    }
}

/// What a deployment costs at a given throughput.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cost {
    /// $/GPU-hour used.
    pub price_usd_per_gpu_hour: f64,
    /// GPUs.
    pub gpus: u32,
    /// Fleet $/hour.
    pub usd_per_hour: f64,
    /// Fleet $/month (730 h).
    pub usd_per_month: f64,
    /// $ per million output tokens.
    pub usd_per_million_output_tokens: f64,
    /// $ per million input + output tokens.
    pub usd_per_million_total_tokens: f64,
    /// Blended price of a million output tokens when an input token is priced at
    /// `input_output_price_ratio` of an output token.
    pub usd_per_million_output_blended: f64,
    /// The matching price of a million input tokens.
    pub usd_per_million_input_blended: f64,
}

/// Costs of `gpus` GPUs at `price` $/GPU-hour producing `output_tps` and consuming
/// `input_tps` tokens/s; `ratio` = input price / output price. Zero throughput gives zero per-token
/// costs (never NaN or infinity).
pub fn cost(gpus: u32, price: f64, output_tps: f64, input_tps: f64, ratio: f64) -> Cost {
    let usd_per_hour = gpus as f64 * price;
    let per_m = |tps: f64| {
        if tps > 0.0 && tps.is_finite() {
            usd_per_hour / (tps * 3600.0) * 1e6
        } else {
            0.0
        }
    };
    let weighted = output_tps + ratio * input_tps;
    let out_blended = per_m(weighted);
    Cost {
        price_usd_per_gpu_hour: price,
        gpus,
        usd_per_hour,
        usd_per_month: usd_per_hour * HOURS_PER_MONTH,
        usd_per_million_output_tokens: per_m(output_tps),
        usd_per_million_total_tokens: per_m(output_tps + input_tps),
        usd_per_million_output_blended: out_blended,
        usd_per_million_input_blended: out_blended * ratio,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_has_every_gpu_profile() {
        let c = PriceCatalog::embedded().unwrap();
        for g in crate::gpu::gpu_names() {
            assert!(c.price(g, PriceColumn::OnDemand).unwrap() > 0.0, "{g}");
            assert!(
                c.price(g, PriceColumn::Spot).unwrap() < c.price(g, PriceColumn::OnDemand).unwrap()
            );
        }
        // The aliases every command accepts are priced too.
        for (alias, name) in Kind::Gpu.aliases() {
            assert_eq!(
                c.price(alias, PriceColumn::OnDemand).unwrap(),
                c.price(name, PriceColumn::OnDemand).unwrap()
            );
        }
    }

    #[test]
    fn cost_formulas() {
        // 8 GPUs at $2/h = $16/h; 4000 output tok/s = 14.4M tok/h -> $1.111 per M.
        let c = cost(8, 2.0, 4000.0, 8000.0, 0.25);
        assert_eq!(c.usd_per_hour, 16.0);
        assert!((c.usd_per_million_output_tokens - 16.0 / 14.4).abs() < 1e-9);
        assert!((c.usd_per_million_total_tokens - 16.0 / 43.2).abs() < 1e-9);
        // Blended: 16 $/h = P_out x (4000 + 0.25 x 8000) x 3600 / 1e6.
        assert!((c.usd_per_million_output_blended - 16.0 / (6000.0 * 3600.0) * 1e6).abs() < 1e-9);
        assert_eq!(
            cost(1, 2.0, 0.0, 0.0, 0.25).usd_per_million_output_tokens,
            0.0
        );
    }
}
