//! One SVG timeline per fault kind: each key's critical sections by
//! client, the part of a body past its local deadline in red, each
//! deadline marked, stale writes marked, the fault window shaded. Drawn by
//! hand in the style of verrou-bench's BENCHMARKS.svg.

use std::fmt::Write as _;

use crate::run::Outcome;

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 20.0;
const LANE_H: f64 = 16.0;
const BAR_H: f64 = 11.0;
const TOP: f64 = 58.0;

const COLORS: [&str; 8] = [
    "#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#4a5568",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The timeline of one scenario.
pub fn timeline(o: &Outcome, clients: usize, keys: usize) -> String {
    let (t0, t1) = o.span;
    let span = (t1 - t0).max(1) as f64;
    let x = |t: i64| LEFT + ((t - t0) as f64 / span).clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT);
    let lanes = keys * clients;
    let height = TOP + LANE_H * lanes as f64 + 22.0 * keys as f64 + 50.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        svg,
        "<defs><style>.title{{font-size:14px;font-weight:bold}} .label{{fill:#2d3748}} .note{{fill:#4a5568}}</style></defs>"
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let sc = &o.scenario;
    let m = &o.measured;
    let _ = writeln!(
        svg,
        r#"<text x="10" y="20" class="title">{} · {} · {}</text>"#,
        escape(sc.backend.label()),
        escape(sc.topology.label()),
        escape(&sc.fault.to_string())
    );
    let _ = writeln!(
        svg,
        r#"<text x="10" y="38" class="note">{} acquisitions · {} overlaps inside validity windows · stale writes {} accepted / {} rejected · {} · seed {:#x}</text>"#,
        m.acquisitions,
        m.overlaps,
        m.stale_accepted,
        m.stale_rejected,
        escape(
            &crate::report::cells(o)
                .result
                .replace("**", "")
                .chars()
                .take(90)
                .collect::<String>()
        ),
        o.seed
    );
    let bottom = height - 40.0;
    for w in &o.snapshot.windows {
        let (a, b) = (x(w.from), x(w.to));
        let _ = writeln!(
            svg,
            r##"<rect x="{a:.1}" y="{:.0}" width="{:.1}" height="{:.0}" fill="#a0aec0" opacity="0.35"/>"##,
            TOP - 6.0,
            (b - a).max(1.0),
            bottom - TOP + 6.0
        );
    }
    let mut y = TOP;
    for key in 0..keys {
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{:.0}" class="label" font-weight="bold">key {key}</text>"#,
            y + 10.0
        );
        y += 16.0;
        for client in 0..clients {
            let _ = writeln!(
                svg,
                r#"<text x="{:.0}" y="{:.0}" class="label" text-anchor="end">client {client}</text>"#,
                LEFT - 8.0,
                y + 10.0
            );
            let color = COLORS[client % COLORS.len()];
            for b in o.snapshot.bodies.iter().filter(|b| b.key == key && b.client == client) {
                let (s, ve, e) = (x(b.start), x(b.valid_end()), x(b.end));
                let fence = b
                    .fence
                    .map_or("no fencing token".to_owned(), |f| format!("fencing token {f}"));
                let _ = writeln!(
                    svg,
                    r#"<rect x="{s:.1}" y="{y:.1}" width="{:.1}" height="{BAR_H}" fill="{color}"><title>{fence}</title></rect>"#,
                    (ve - s).max(0.8)
                );
                if b.end > b.deadline {
                    let _ = writeln!(
                        svg,
                        r##"<rect x="{ve:.1}" y="{y:.1}" width="{:.1}" height="{BAR_H}" fill="#e53e3e" opacity="0.55"/>"##,
                        (e - ve).max(0.8)
                    );
                }
                let d = x(b.deadline);
                if b.deadline <= t1 && sc.backend != crate::plan::Backend::Control {
                    let _ = writeln!(
                        svg,
                        r##"<line x1="{d:.1}" x2="{d:.1}" y1="{:.1}" y2="{:.1}" stroke="#1a202c" stroke-width="1"/>"##,
                        y - 2.0,
                        y + BAR_H + 2.0
                    );
                }
                if b.cancelled {
                    let _ = writeln!(
                        svg,
                        r##"<text x="{e:.1}" y="{:.1}" font-size="10" fill="#c53030">×</text>"##,
                        y + 9.0
                    );
                }
            }
            for w in o
                .snapshot
                .writes
                .iter()
                .filter(|w| w.key == key && w.client == client && !w.accepted)
            {
                let _ = writeln!(
                    svg,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="3" fill="none" stroke="#1a202c"/>"##,
                    x(w.at),
                    y + BAR_H / 2.0
                );
            }
            y += LANE_H;
        }
        y += 6.0;
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" x2="{:.0}" y1="{bottom:.0}" y2="{bottom:.0}" stroke="#718096"/>"##,
        WIDTH - RIGHT
    );
    let secs = span / 1e6;
    let step = if secs > 4.0 { 1.0 } else { 0.5 };
    let mut s = 0.0;
    while s <= secs + 1e-9 {
        let tx = x(t0 + (s * 1e6) as i64);
        let _ = writeln!(
            svg,
            r#"<text x="{tx:.1}" y="{:.0}" class="note" text-anchor="middle">{s:.1} s</text>"#,
            bottom + 14.0
        );
        s += step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="10" y="{:.0}" class="note">bar: a critical section inside its validity window · red: past the local deadline · |: local deadline · ×: cancelled on loss · ○: write rejected by fencing · grey: fault window</text>"#,
        height - 8.0
    );
    svg.push_str("</svg>\n");
    svg
}
