//! A hand-written SVG of the headline numbers: one horizontal bar chart per
//! question, coloured by who is measured, with the target drawn in.

use std::fmt::Write as _;

use crate::results::{Kind, Library, RAW_FRED_SCRIPTED, RAW_REDIS_RS, Results};
use crate::targets;
use crate::targets::LATENCY_VS_RAW;

/// One bar.
struct Bar {
    label: String,
    value: f64,
    kind: Kind,
    /// A per-bar limit (drawn as a red tick), e.g. 1.15 × 2 × PING.
    marker: Option<f64>,
}

/// One chart.
struct Panel {
    title: String,
    unit: &'static str,
    bars: Vec<Bar>,
    /// A limit for every bar (drawn as a dashed red line).
    target: Option<(f64, String)>,
    note: Option<String>,
}

const WIDTH: f64 = 980.0;
const LABEL_W: f64 = 360.0;
const BAR_W: f64 = 470.0;
const ROW_H: f64 = 20.0;
const BAR_H: f64 = 14.0;

fn color(kind: Kind) -> &'static str {
    match kind {
        Kind::Verrou => "#2b6cb0",
        Kind::Peer => "#dd6b20",
        Kind::Raw => "#718096",
        Kind::Reference => "#38a169",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A value with a sensible number of digits.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn panel_height(p: &Panel) -> f64 {
    let note = if p.note.is_some() { 16.0 } else { 0.0 };
    34.0 + ROW_H * p.bars.len().max(1) as f64 + note + 18.0
}

fn draw_panel(svg: &mut String, p: &Panel, top: f64) {
    let _ = writeln!(
        svg,
        r#"<text x="10" y="{:.0}" class="title">{}</text>"#,
        top + 18.0,
        escape(&p.title)
    );
    let scale_max = p
        .bars
        .iter()
        .map(|b| b.value.max(b.marker.unwrap_or(0.0)))
        .chain(p.target.as_ref().map(|t| t.0))
        .fold(0.0_f64, f64::max)
        * 1.08;
    let scale = |v: f64| if scale_max > 0.0 { v / scale_max * BAR_W } else { 0.0 };
    let mut y = top + 30.0;
    if p.bars.is_empty() {
        let _ = writeln!(
            svg,
            r#"<text x="{LABEL_W}" y="{:.0}" class="label">(not measured in this run)</text>"#,
            y + 12.0
        );
    }
    for b in &p.bars {
        let w = scale(b.value).max(1.0);
        let _ = writeln!(
            svg,
            r#"<text x="{:.0}" y="{:.0}" class="label" text-anchor="end">{}</text>"#,
            LABEL_W - 8.0,
            y + 11.0,
            escape(&b.label)
        );
        let _ = writeln!(
            svg,
            r#"<rect x="{LABEL_W}" y="{y:.1}" width="{w:.1}" height="{BAR_H}" fill="{}"/>"#,
            color(b.kind)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.0}" class="value">{} {}</text>"#,
            LABEL_W + w + 5.0,
            y + 11.0,
            short(b.value),
            p.unit
        );
        if let Some(m) = b.marker {
            let x = LABEL_W + scale(m);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#c53030" stroke-width="2"/>"##,
                y - 2.0,
                y + BAR_H + 2.0
            );
        }
        y += ROW_H;
    }
    if let Some((t, label)) = &p.target {
        let x = LABEL_W + scale(*t);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#c53030" stroke-dasharray="4 3" stroke-width="1.5"/>"##,
            top + 26.0,
            y
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.0}" class="target">{}</text>"#,
            x + 4.0,
            top + 26.0,
            escape(label)
        );
    }
    if let Some(note) = &p.note {
        let _ = writeln!(
            svg,
            r#"<text x="{LABEL_W}" y="{:.0}" class="note">{}</text>"#,
            y + 12.0,
            escape(note)
        );
    }
}

fn panels(r: &Results) -> Vec<Panel> {
    let mut out = Vec::new();
    if let Some(u) = &r.uncontended {
        let ceiling = u
            .ceilings
            .iter()
            .map(|c| format!("{}: {} SET/s", c.label, short(c.rps)))
            .collect::<Vec<_>>()
            .join(" · ");
        out.push(Panel {
            title: format!(
                "1. Uncontended acquire+release pairs per second ({} tasks, higher is better)",
                u.tasks
            ),
            unit: "/s",
            bars: u
                .rows
                .iter()
                .map(|row| Bar {
                    label: row.label.clone(),
                    value: row.m.rate(),
                    kind: row.kind,
                    marker: None,
                })
                .collect(),
            target: None,
            note: (!ceiling.is_empty()).then(|| format!("server ceilings (commands, a pair is 2): {ceiling}")),
        });
        out.push(Panel {
            title: "1. Client CPU per pair (µs, lower is better)".to_owned(),
            unit: "µs",
            bars: u
                .rows
                .iter()
                .map(|row| Bar {
                    label: row.label.clone(),
                    value: row.m.client_cpu_per_op().as_secs_f64() * 1e6,
                    kind: row.kind,
                    marker: None,
                })
                .collect(),
            target: None,
            note: None,
        });
    }
    for l in r.latency.iter().chain(&r.latency_multi) {
        out.push(Panel {
            title: format!(
                "2. Sequential pair latency p50, {} runtime (µs; red tick: 1.05 × the raw client's pair p50, same library)",
                l.runtime
            ),
            unit: "µs",
            bars: l
                .pings
                .iter()
                .chain(&l.rows)
                .map(|(lib, row)| Bar {
                    label: row.label.clone(),
                    value: row.m.latencies.p50().as_secs_f64() * 1e6,
                    kind: row.kind,
                    marker: if row.kind == Kind::Verrou {
                        let raw = match lib {
                            Library::RedisRs => RAW_REDIS_RS,
                            Library::Fred => RAW_FRED_SCRIPTED,
                            Library::Postgres => crate::pg::RAW_TOKIO_PG,
                            Library::Etcd => crate::etcd::RAW_ETCD,
                            Library::Nats => crate::nats::RAW_NATS,
                        };
                        l.rows
                            .iter()
                            .find(|(_, r)| r.label == raw)
                            .map(|(_, r)| r.m.latencies.p50().as_secs_f64() * 1e6 * LATENCY_VS_RAW)
                    } else {
                        None
                    },
                })
                .collect(),
            target: None,
            note: None,
        });
    }
    if let Some(h) = &r.hot_keys {
        let bars = |f: &dyn Fn(&crate::results::HotRow) -> f64| {
            h.rows
                .iter()
                .map(|row| Bar {
                    label: format!("{} ({})", row.label, row.shape.name()),
                    value: f(row),
                    kind: row.kind,
                    marker: None,
                })
                .collect()
        };
        out.push(Panel {
            title: format!(
                "3. Hot key, {} contenders: wait p99 of acquisitions that changed holder (ms, lower is better)",
                h.contenders
            ),
            unit: "ms",
            bars: bars(&|row| row.r.waits.p99().as_secs_f64() * 1e3),
            target: Some((
                targets::HOT_WAIT_P99_MS,
                format!("target {} ms", targets::HOT_WAIT_P99_MS),
            )),
            note: None,
        });
        out.push(Panel {
            title: "3. Hot key: acquisitions per second (higher is better)".to_owned(),
            unit: "/s",
            bars: bars(&|row| row.r.rate()),
            target: None,
            note: None,
        });
    }
    if let Some(u) = &r.updates {
        out.push(Panel {
            title: format!(
                "4. Optimistic increments, {} tasks on one value: server commands per successful increment (lower is better)",
                u.tasks
            ),
            unit: "",
            bars: u
                .rows
                .iter()
                .map(|row| Bar {
                    label: row.label.clone(),
                    value: row.commands_per_increment(),
                    kind: row.kind,
                    marker: None,
                })
                .collect(),
            target: None,
            note: None,
        });
    }
    if let Some(rl) = &r.redlock {
        out.push(Panel {
            title: format!(
                "5. Redlock: sequential pair latency p50, {} runtime (µs; red tick: 1.5 × single instance)",
                rl.runtime
            ),
            unit: "µs",
            bars: rl
                .floors
                .iter()
                .map(|row| Bar {
                    label: row.label.clone(),
                    value: row.m.latencies.p50().as_secs_f64() * 1e6,
                    kind: row.kind,
                    marker: None,
                })
                .chain(rl.pairs.iter().flat_map(|(one, five)| {
                    let limit = one.m.latencies.p50().as_secs_f64() * 1e6 * targets::REDLOCK_RATIO;
                    [
                        Bar {
                            label: one.label.clone(),
                            value: one.m.latencies.p50().as_secs_f64() * 1e6,
                            kind: one.kind,
                            marker: None,
                        },
                        Bar {
                            label: five.label.clone(),
                            value: five.m.latencies.p50().as_secs_f64() * 1e6,
                            kind: five.kind,
                            marker: Some(limit),
                        },
                    ]
                }))
                .collect(),
            target: None,
            note: None,
        });
    }
    if let Some(m) = &r.memory {
        let per_pair = |row: &crate::results::OpRow| crate::report::ns_per_op(row);
        let tokio_ns = m.tokio.as_ref().map(per_pair);
        out.push(Panel {
            title: "6. In-process: time per acquire+release (ns, lower is better)".to_owned(),
            unit: "ns",
            bars: m
                .tokio
                .iter()
                .chain(&m.verrou)
                .chain(&m.diagnostics)
                .map(|row| Bar {
                    label: row.label.clone(),
                    value: per_pair(row),
                    kind: row.kind,
                    marker: None,
                })
                .collect(),
            target: tokio_ns.map(|t| {
                (
                    t * targets::MEMORY_RATIO,
                    format!("{}× tokio mutex", targets::MEMORY_RATIO),
                )
            }),
            note: None,
        });
    }
    if let Some(rn) = &r.renewals {
        out.push(Panel {
            title: format!(
                "7. {} locks under auto-renewal: client CPU (% of one core, lower is better)",
                rn.rows.first().map_or(0, |row| row.locks)
            ),
            unit: "%",
            bars: rn
                .rows
                .iter()
                .map(|row| Bar {
                    label: row.label.clone(),
                    value: row.client_core_share() * 100.0,
                    kind: Kind::Verrou,
                    marker: None,
                })
                .collect(),
            target: Some((targets::RENEW_CORE_SHARE * 100.0, "target 5%".to_owned())),
            note: None,
        });
    }
    out
}

/// The whole SVG.
pub fn render(r: &Results) -> String {
    let panels = panels(r);
    let legend_h = 34.0;
    let height = legend_h + panels.iter().map(panel_height).sum::<f64>() + 10.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="Helvetica, Arial, sans-serif">"#
    );
    svg.push_str(
        "<style>.title{font-size:13px;font-weight:bold;fill:#1a202c}.label{font-size:11px;fill:#2d3748}\
         .value{font-size:11px;fill:#1a202c}.target{font-size:10px;fill:#c53030}.note{font-size:10px;fill:#4a5568}\
         .legend{font-size:11px;fill:#2d3748}</style>\n",
    );
    let _ = writeln!(svg, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let mut x = 10.0;
    for (kind, name) in [
        (Kind::Verrou, "verrou"),
        (Kind::Peer, "rslock (peer)"),
        (Kind::Raw, "raw client, same library"),
        (Kind::Reference, "reference / diagnostic"),
    ] {
        let _ = writeln!(
            svg,
            r#"<rect x="{x:.0}" y="10" width="12" height="12" fill="{}"/><text x="{:.0}" y="20" class="legend">{name}</text>"#,
            color(kind),
            x + 16.0
        );
        x += 40.0 + name.len() as f64 * 6.2;
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{x:.0}" x2="{:.0}" y1="16" y2="16" stroke="#c53030" stroke-dasharray="4 3" stroke-width="1.5"/><text x="{:.0}" y="20" class="legend">target</text>"##,
        x + 18.0,
        x + 22.0
    );
    let mut top = legend_h;
    for p in &panels {
        draw_panel(&mut svg, p, top);
        top += panel_height(p);
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_empty_run_and_escapes_labels() {
        let svg = render(&Results::default());
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(short(1_234_567.0), "1.23M");
        assert_eq!(short(98_765.0), "99k");
        assert_eq!(short(7.456), "7.46");
    }
}
