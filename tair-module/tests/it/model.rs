//! Randomized model test: long fixed-seed sequences of exString (and CAS/CAD)
//! commands, each reply compared byte for byte with a small in-test model of
//! the reference semantics (tairstring.md), the whole keyspace compared with
//! the model every few steps, and the replica compared with the primary at
//! the end (random sequences must replicate deterministically too).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)] // tests

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;

const SEEDS: [u64; 4] = [1, 0x5eed, 0xdead_beef, 20_261_130];
const STEPS_PER_SEED: usize = 2500;
const KEYS: [&str; 5] = ["k0", "k1", "k2", "k3", "k4"];

/// splitmix64: small, fixed-seed, good enough for test input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
    /// Random keyword case: the grammar is case-insensitive.
    fn case(&mut self, kw: &str) -> Vec<u8> {
        kw.bytes()
            .map(|c| if self.chance(50) { c.to_ascii_lowercase() } else { c })
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Plain(Vec<u8>),
    Ex { value: Vec<u8>, version: u64, flags: u32 },
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    val: Val,
    /// All TTLs used here are long, so the model only tracks "has a TTL".
    ttl: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum TtlOpt {
    None,
    Set,
    Keep,
}

/// Options in structured form; rendered to tokens in a random order.
#[derive(Clone, Debug, Default)]
struct Opts {
    ttl: Option<TtlOpt>,
    nx: bool,
    xx: bool,
    /// (is ABS, n)
    ver: Option<(bool, i64)>,
    flags: Option<u32>,
    withversion: bool,
    def: Option<i64>,
    min: Option<i64>,
    max: Option<i64>,
    nonegative: bool,
    /// A structural error (unknown keyword).
    bad: bool,
}

impl Opts {
    fn ttl(&self) -> TtlOpt {
        self.ttl.unwrap_or(TtlOpt::None)
    }
    fn render(&self, rng: &mut Rng, now_s: i64) -> Vec<Vec<u8>> {
        let mut groups: Vec<Vec<Vec<u8>>> = Vec::new();
        match self.ttl() {
            TtlOpt::Set => {
                let g = match rng.below(4) {
                    0 => vec![rng.case("EX"), b"1000".to_vec()],
                    1 => vec![rng.case("PX"), b"1000000".to_vec()],
                    2 => vec![rng.case("EXAT"), (now_s + 1000).to_string().into_bytes()],
                    _ => vec![rng.case("PXAT"), ((now_s + 1000) * 1000).to_string().into_bytes()],
                };
                groups.push(g);
            }
            TtlOpt::Keep => groups.push(vec![rng.case("KEEPTTL")]),
            TtlOpt::None => {}
        }
        if self.nx {
            groups.push(vec![rng.case("NX")]);
        }
        if self.xx {
            groups.push(vec![rng.case("XX")]);
        }
        if let Some((abs, n)) = self.ver {
            groups.push(vec![
                rng.case(if abs { "ABS" } else { "VER" }),
                n.to_string().into_bytes(),
            ]);
        }
        if let Some(f) = self.flags {
            groups.push(vec![rng.case("FLAGS"), f.to_string().into_bytes()]);
        }
        if self.withversion {
            groups.push(vec![rng.case("WITHVERSION")]);
        }
        if let Some(d) = self.def {
            groups.push(vec![rng.case("DEF"), d.to_string().into_bytes()]);
        }
        if let Some(m) = self.min {
            groups.push(vec![rng.case("MIN"), m.to_string().into_bytes()]);
        }
        if let Some(m) = self.max {
            groups.push(vec![rng.case("MAX"), m.to_string().into_bytes()]);
        }
        if self.nonegative {
            groups.push(vec![rng.case("NONEGATIVE")]);
        }
        if self.bad {
            let bad: [&[u8]; 3] = [b"FOO", b"EX", b"VER"];
            groups.push(vec![rng.pick(&bad).to_vec()]);
            // A keyword missing its value must be last to be an error.
            let last = groups.len() - 1;
            let g = groups.remove(last);
            // Shuffle the others, then append the bad one.
            shuffle(rng, &mut groups);
            groups.push(g);
            return groups.concat();
        }
        shuffle(rng, &mut groups);
        groups.concat()
    }
}

fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// What the server should answer.
enum Want {
    Exact(Vec<u8>),
    /// The model cannot predict the exact bytes (inexact float): accept the
    /// reply and reload the key from the server.
    Resync(Vec<u8>),
}

/// Redis' strict integer syntax: the canonical decimal form of an i64.
fn strict_i64(s: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(s).ok()?;
    let n: i64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

enum Float {
    /// Exactly representable with a few binary digits: f64 arithmetic and
    /// formatting then agree with C long double.
    Exact(f64),
    /// A valid float the model does not compute exactly.
    Inexact,
    Invalid,
}

fn float_of(s: &[u8]) -> Float {
    if s.is_empty() {
        return Float::Exact(0.0); // strtold("") is 0 with nothing left over
    }
    let Ok(t) = std::str::from_utf8(s) else {
        return Float::Invalid;
    };
    // Our generated strings only use digits, '-', '.', letters and NUL.
    let plausible = t.bytes().all(|c| c.is_ascii_digit() || c == b'-' || c == b'.');
    match t.parse::<f64>() {
        Ok(v) if plausible && v.is_finite() => {
            if (v * 1024.0).fract() == 0.0 && v.abs() < 1e12 {
                Float::Exact(v)
            } else {
                Float::Inexact
            }
        }
        _ => Float::Invalid,
    }
}

fn fmt_float(v: f64) -> Vec<u8> {
    let s = format!("{v:.17}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.as_bytes().to_vec()
}

struct Model {
    keys: BTreeMap<Vec<u8>, Entry>,
}

impl Model {
    fn ex(&self, k: &[u8]) -> Option<(&Vec<u8>, u64, u32)> {
        match self.keys.get(k).map(|e| &e.val) {
            Some(Val::Ex { value, version, flags }) => Some((value, *version, *flags)),
            _ => None,
        }
    }
    fn is_plain(&self, k: &[u8]) -> bool {
        matches!(self.keys.get(k).map(|e| &e.val), Some(Val::Plain(_)))
    }
    fn ttl_after(&self, k: &[u8], t: TtlOpt) -> bool {
        match t {
            TtlOpt::Set => true,
            TtlOpt::Keep => self.keys.get(k).is_some_and(|e| e.ttl),
            TtlOpt::None => false,
        }
    }
    fn put_ex(&mut self, k: &[u8], value: Vec<u8>, version: u64, flags: u32, ttl: bool) {
        self.keys.insert(
            k.to_vec(),
            Entry {
                val: Val::Ex { value, version, flags },
                ttl,
            },
        );
    }
}

fn ver_reply(v: u64) -> Vec<u8> {
    int(v as i64)
}

/// Generates one command and the model's expected reply (updating the model).
fn step(rng: &mut Rng, m: &mut Model, now_s: i64) -> (Vec<Vec<u8>>, Want) {
    let key = rng.pick(&KEYS).as_bytes().to_vec();
    let cur_ver = m.ex(&key).map(|e| e.1);
    let values: [&[u8]; 10] = [b"", b"0", b"7", b"-3", b"1.5", b"abc", b"a\0b", b"10", b"-0.25", b"x y"];
    let value = rng.pick(&values).to_vec();
    // A version argument: often the right one.
    let version_arg = |rng: &mut Rng| -> i64 {
        match (rng.below(6), cur_ver) {
            (0..=2, Some(v)) if v <= i64::MAX as u64 => v as i64,
            (3, _) => 0,
            (4, _) => rng.below(5) as i64,
            _ => rng.below(3) as i64 + 1,
        }
    };
    let mut o = Opts {
        bad: rng.chance(4),
        ..Opts::default()
    };
    let with_ttl = |rng: &mut Rng, o: &mut Opts, keep: bool| {
        o.ttl = Some(match rng.below(if keep { 3 } else { 2 }) {
            0 => TtlOpt::None,
            1 => TtlOpt::Set,
            _ => TtlOpt::Keep,
        });
    };
    let nx_xx = |rng: &mut Rng, o: &mut Opts| match rng.below(5) {
        0 => o.nx = true,
        1 => o.xx = true,
        _ => {}
    };
    let cmd = *rng.pick(&[
        "EXSET",
        "EXSET",
        "EXSET",
        "EXGET",
        "EXCAS",
        "EXCAS",
        "EXCAD",
        "EXSETVER",
        "EXINCRBY",
        "EXINCRBY",
        "EXINCRBYFLOAT",
        "EXINCRBYFLOAT",
        "EXAPPEND",
        "EXPREPEND",
        "EXGAE",
        "CAS",
        "CAD",
        "SET",
        "DEL",
        "DEL",
        "DEL",
    ]);
    let mut args: Vec<Vec<u8>> = vec![rng.case(cmd), key.clone()];
    let want: Want = match cmd {
        "EXSET" => {
            args.push(value.clone());
            with_ttl(rng, &mut o, true);
            nx_xx(rng, &mut o);
            if rng.chance(50) {
                let n = version_arg(rng);
                let abs = rng.chance(30);
                let n = if abs && rng.chance(3) { i64::MAX } else { n };
                o.ver = Some((abs, if rng.chance(3) { -1 } else { n }));
            }
            if rng.chance(30) {
                o.flags = Some(rng.below(1000) as u32);
            }
            o.withversion = rng.chance(40);
            args.extend(o.render(rng, now_s));
            Want::Exact(if o.bad || o.ver.is_some_and(|v| v.1 < 0) {
                se()
            } else if m.is_plain(&key) {
                wt()
            } else {
                match m.ex(&key) {
                    None if o.xx => nil(),
                    Some(_) if o.nx => nil(),
                    Some((_, v, _)) if matches!(o.ver, Some((false, n)) if n != 0 && n as u64 != v) => stale(),
                    cur => {
                        let (old_v, old_f) = cur.map_or((None, 0), |c| (Some(c.1), c.2));
                        let version = match o.ver {
                            Some((true, n)) => n as u64,
                            _ => old_v.unwrap_or(0).wrapping_add(1),
                        };
                        let ttl = m.ttl_after(&key, o.ttl());
                        m.put_ex(&key, value.clone(), version, o.flags.unwrap_or(old_f), ttl);
                        if o.withversion { ver_reply(version) } else { ok() }
                    }
                }
            })
        }
        "EXGET" => {
            let mode = rng.below(3);
            if mode == 1 {
                args.push(rng.case("WITHFLAGS"));
            } else if mode == 2 && rng.chance(20) {
                args.push(b"FLAGS".to_vec());
            }
            Want::Exact(if args.len() == 3 && args[2] == b"FLAGS" {
                se()
            } else if m.is_plain(&key) {
                wt()
            } else {
                match m.ex(&key) {
                    None => nil(),
                    Some((v, ver, f)) => {
                        let mut items = vec![bulk(v), ver_reply(ver)];
                        if args.len() == 3 {
                            items.push(int(i64::from(f)));
                        }
                        arr(&items)
                    }
                }
            })
        }
        "EXCAS" => {
            args.push(value.clone());
            let n = version_arg(rng);
            let varg: Vec<u8> = match rng.below(12) {
                0 => b"abc".to_vec(),
                1 => b"-1".to_vec(),
                _ => n.to_string().into_bytes(),
            };
            args.push(varg.clone());
            with_ttl(rng, &mut o, true);
            args.extend(o.render(rng, now_s));
            Want::Exact(if o.bad {
                se()
            } else if varg == b"abc" {
                err("ERR version should be integer")
            } else if varg == b"-1" {
                se()
            } else if m.is_plain(&key) {
                wt()
            } else {
                match m.ex(&key) {
                    None => int(-1),
                    Some((v, ver, _)) if ver != n as u64 => arr(&[st("CAS_FAILED"), bulk(v), ver_reply(ver)]),
                    Some((_, ver, f)) => {
                        let ttl = m.ttl_after(&key, o.ttl());
                        let nv = ver.wrapping_add(1);
                        m.put_ex(&key, value.clone(), nv, f, ttl);
                        excas_ok(nv as i64)
                    }
                }
            })
        }
        "EXCAD" => {
            let n = version_arg(rng);
            let abc = rng.chance(8);
            args.push(if abc {
                b"abc".to_vec()
            } else {
                n.to_string().into_bytes()
            });
            Want::Exact(if m.is_plain(&key) {
                wt()
            } else if abc {
                se()
            } else {
                match m.ex(&key) {
                    None => int(-1),
                    Some((_, ver, _)) if ver != n as u64 => int(0),
                    Some(_) => {
                        m.keys.remove(&key);
                        int(1)
                    }
                }
            })
        }
        "EXSETVER" => {
            let n = rng.below(20) as i64 - 2;
            args.push(n.to_string().into_bytes());
            Want::Exact(if m.is_plain(&key) {
                wt()
            } else {
                match m.ex(&key) {
                    None => int(0),
                    Some(_) if n <= 0 => se(),
                    Some((v, _, f)) => {
                        let (v, ttl) = (v.clone(), m.keys[&key].ttl);
                        m.put_ex(&key, v, n as u64, f, ttl);
                        int(1)
                    }
                }
            })
        }
        "EXINCRBY" => {
            let incr: Vec<u8> = match rng.below(10) {
                0 => b"x".to_vec(),
                1 => i64::MAX.to_string().into_bytes(),
                _ => (rng.below(21) as i64 - 10).to_string().into_bytes(),
            };
            args.push(incr.clone());
            with_ttl(rng, &mut o, true);
            nx_xx(rng, &mut o);
            if rng.chance(30) {
                o.ver = Some((rng.chance(30), version_arg(rng)));
            }
            if rng.chance(20) {
                o.def = Some(rng.below(11) as i64 - 5);
            }
            if rng.chance(30) {
                o.min = Some(rng.below(13) as i64 - 8);
            }
            if rng.chance(30) {
                o.max = Some(rng.below(13) as i64 - 4);
            }
            o.nonegative = rng.chance(15);
            o.withversion = rng.chance(30);
            args.extend(o.render(rng, now_s));
            let incr = strict_i64(&incr);
            Want::Exact(if o.bad {
                se()
            } else if m.is_plain(&key) {
                wt()
            } else if incr.is_none() {
                not_int()
            } else if matches!((o.min, o.max), (Some(lo), Some(hi)) if hi < lo) {
                min_max()
            } else {
                let incr = incr.unwrap_or(0);
                let cur = m.ex(&key).map(|(v, ver, f)| (v.clone(), ver, f));
                match cur {
                    None if o.xx => nil(),
                    Some(_) if o.nx => nil(),
                    Some((v, _, _)) if strict_i64(&v).is_none() => not_int(),
                    Some((_, ver, _)) if matches!(o.ver, Some((false, n)) if n != 0 && n as u64 != ver) => stale(),
                    cur => {
                        let start = match &cur {
                            None => o.def.unwrap_or(0),
                            Some((v, _, _)) => strict_i64(v).unwrap_or(0),
                        };
                        let skip = o.def.is_some() && cur.is_none();
                        let sum = if skip { Some(start) } else { start.checked_add(incr) };
                        match sum {
                            Some(s) if skip || !(o.max.is_some_and(|h| s > h) || o.min.is_some_and(|l| s < l)) => {
                                let s = if o.nonegative && s < 0 { 0 } else { s };
                                let version = match o.ver {
                                    Some((true, n)) => n as u64,
                                    _ => cur.as_ref().map_or(0, |c| c.1).wrapping_add(1),
                                };
                                let flags = cur.as_ref().map_or(0, |c| c.2);
                                let ttl = m.ttl_after(&key, o.ttl());
                                m.put_ex(&key, s.to_string().into_bytes(), version, flags, ttl);
                                if o.withversion {
                                    arr(&[int(s), ver_reply(version)])
                                } else {
                                    int(s)
                                }
                            }
                            _ => overflow(),
                        }
                    }
                }
            })
        }
        "EXINCRBYFLOAT" => {
            let choices: [&[u8]; 7] = [b"1", b"-2", b"0.5", b"2.25", b"x", b"-0.75", b"3"];
            let incr = choices[rng.below(choices.len() as u64) as usize];
            args.push(incr.to_vec());
            with_ttl(rng, &mut o, true);
            nx_xx(rng, &mut o);
            if rng.chance(30) {
                o.ver = Some((rng.chance(30), version_arg(rng)));
            }
            if rng.chance(25) {
                o.min = Some(rng.below(13) as i64 - 8);
            }
            if rng.chance(25) {
                o.max = Some(rng.below(13) as i64 - 4);
            }
            args.extend(o.render(rng, now_s));
            if m.is_plain(&key) {
                Want::Exact(wt())
            } else if incr == b"x" {
                Want::Exact(not_float())
            } else if o.bad {
                Want::Exact(se())
            } else if matches!((o.min, o.max), (Some(lo), Some(hi)) if hi < lo) {
                Want::Exact(min_max())
            } else {
                let by = match float_of(incr) {
                    Float::Exact(v) => v,
                    _ => 0.0,
                };
                let cur = m.ex(&key).map(|(v, ver, f)| (v.clone(), ver, f));
                match cur {
                    None if o.xx => Want::Exact(nil()),
                    Some(_) if o.nx => Want::Exact(nil()),
                    Some((v, _, _)) if matches!(float_of(&v), Float::Invalid) => Want::Exact(not_float()),
                    Some((_, ver, _)) if matches!(o.ver, Some((false, n)) if n != 0 && n as u64 != ver) => {
                        Want::Exact(stale())
                    }
                    Some((v, _, _)) if matches!(float_of(&v), Float::Inexact) => Want::Resync(key.clone()),
                    cur => {
                        let start = match &cur {
                            Some((v, _, _)) => match float_of(v) {
                                Float::Exact(x) => x,
                                _ => 0.0,
                            },
                            None => 0.0,
                        };
                        let r = start + by;
                        if o.max.is_some_and(|h| r > h as f64) || o.min.is_some_and(|l| r < l as f64) {
                            Want::Exact(overflow())
                        } else {
                            let version = match o.ver {
                                Some((true, n)) => n as u64,
                                _ => cur.as_ref().map_or(0, |c| c.1).wrapping_add(1),
                            };
                            let flags = cur.as_ref().map_or(0, |c| c.2);
                            let ttl = m.ttl_after(&key, o.ttl());
                            let s = fmt_float(r);
                            m.put_ex(&key, s.clone(), version, flags, ttl);
                            Want::Exact(bulk(s))
                        }
                    }
                }
            }
        }
        "EXAPPEND" | "EXPREPEND" => {
            args.push(value.clone());
            nx_xx(rng, &mut o);
            if rng.chance(40) {
                let n = version_arg(rng);
                o.ver = Some((rng.chance(30), if rng.chance(5) { -1 } else { n }));
            }
            args.extend(o.render(rng, now_s));
            Want::Exact(if o.bad || o.ver.is_some_and(|v| v.1 < 0) {
                se()
            } else {
                let exists = m.keys.contains_key(&key);
                let cur = m.ex(&key).map(|(v, ver, f)| (v.clone(), ver, f));
                if (!exists && o.xx) || (exists && o.nx) {
                    nil()
                } else if m.is_plain(&key) {
                    wt()
                } else {
                    match cur {
                        None => {
                            let version = match o.ver {
                                Some((true, n)) => n as u64,
                                _ => 1,
                            };
                            m.put_ex(&key, value.clone(), version, 0, false);
                            ver_reply(version)
                        }
                        Some((_, ver, _)) if matches!(o.ver, Some((false, n)) if n != 0 && n as u64 != ver) => stale(),
                        Some((v, ver, f)) => {
                            let joined = if cmd == "EXAPPEND" {
                                [v.as_slice(), value.as_slice()].concat()
                            } else {
                                [value.as_slice(), v.as_slice()].concat()
                            };
                            let version = match o.ver {
                                Some((true, n)) => n as u64,
                                _ => ver.wrapping_add(1),
                            };
                            let ttl = m.keys[&key].ttl;
                            m.put_ex(&key, joined, version, f, ttl);
                            ver_reply(version)
                        }
                    }
                }
            })
        }
        "EXGAE" => {
            o.ttl = Some(TtlOpt::Set);
            args.extend(o.render(rng, now_s));
            Want::Exact(if o.bad {
                se()
            } else if m.is_plain(&key) {
                wt()
            } else {
                match m.ex(&key) {
                    None => nil(),
                    Some((v, ver, f)) => {
                        let r = arr(&[bulk(v), ver_reply(ver), int(i64::from(f))]);
                        if let Some(e) = m.keys.get_mut(&key) {
                            e.ttl = true;
                        }
                        r
                    }
                }
            })
        }
        "CAS" => {
            let old = match m.keys.get(&key).map(|e| &e.val) {
                Some(Val::Plain(v)) if rng.chance(70) => v.clone(),
                _ => value.clone(),
            };
            let new = rng.pick(&values).to_vec();
            args.push(old.clone());
            args.push(new.clone());
            with_ttl(rng, &mut o, true);
            args.extend(o.render(rng, now_s));
            Want::Exact(if o.bad {
                se()
            } else {
                match m.keys.get(&key).map(|e| e.val.clone()) {
                    None => int(-1),
                    Some(Val::Ex { .. }) => wt(),
                    Some(Val::Plain(v)) if v != old => int(0),
                    Some(Val::Plain(_)) => {
                        let ttl = o.ttl() == TtlOpt::Set;
                        m.keys.insert(
                            key.clone(),
                            Entry {
                                val: Val::Plain(new),
                                ttl,
                            },
                        );
                        int(1)
                    }
                }
            })
        }
        "CAD" => {
            let v = match m.keys.get(&key).map(|e| &e.val) {
                Some(Val::Plain(v)) if rng.chance(70) => v.clone(),
                _ => value.clone(),
            };
            args.push(v.clone());
            Want::Exact(match m.keys.get(&key).map(|e| e.val.clone()) {
                None => int(-1),
                Some(Val::Ex { .. }) => wt(),
                Some(Val::Plain(cur)) if cur != v => int(0),
                Some(Val::Plain(_)) => {
                    m.keys.remove(&key);
                    int(1)
                }
            })
        }
        "SET" => {
            args.push(value.clone());
            let ttl = rng.chance(40);
            if ttl {
                args.push(b"EX".to_vec());
                args.push(b"1000".to_vec());
            }
            m.keys.insert(
                key.clone(),
                Entry {
                    val: Val::Plain(value.clone()),
                    ttl,
                },
            );
            Want::Exact(ok())
        }
        _ => {
            let existed = m.keys.remove(&key).is_some();
            Want::Exact(int(i64::from(existed)))
        }
    };
    (args, want)
}

/// Reads one key back into the model (after an unpredictable float result).
async fn resync(s: &mut Session, m: &mut Model, key: &[u8]) {
    let got = s
        .client
        .cmd(&[b"EXGET".as_slice(), key, b"WITHFLAGS"])
        .await
        .expect("EXGET");
    let items = got.as_array().expect("EXGET array");
    let pttl = s
        .client
        .cmd(&[b"PTTL".as_slice(), key])
        .await
        .expect("PTTL")
        .as_int()
        .expect("PTTL int");
    m.put_ex(
        key,
        items[0].as_bytes().expect("value").to_vec(),
        items[1].as_int().expect("version") as u64,
        items[2].as_int().expect("flags") as u32,
        pttl > 0,
    );
}

/// The whole keyspace against the model.
async fn check_state(s: &mut Session, m: &Model, seed: u64, i: usize) {
    let snap = snapshot(s).await;
    let names: Vec<String> = snap.iter().map(|k| show(&k.key)).collect();
    let model_names: Vec<String> = m.keys.keys().map(|k| show(k)).collect();
    assert_eq!(names, model_names, "seed {seed} step {i}: key sets");
    for k in &snap {
        let e = &m.keys[&k.key];
        let want = match &e.val {
            Val::Plain(v) => bulk(v),
            Val::Ex { value, version, flags } => arr(&[bulk(value), ver_reply(*version), int(i64::from(*flags))]),
        };
        assert_eq!(show(&k.value), show(&want), "seed {seed} step {i}: {}", show(&k.key));
        assert_eq!(
            k.pttl > 0,
            e.ttl,
            "seed {seed} step {i}: TTL of {} is {}",
            show(&k.key),
            k.pttl
        );
    }
}

#[tokio::test]
async fn random_sequences_match_the_model() {
    let pair = ReplicatedPair::start(builder()).await.expect("start primary + replica");
    let mut s = Session::new(pair.primary()).await;
    let now_s = s.eval_int("return tonumber(redis.call('TIME')[1])", &[]).await;
    let mut total = 0;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for seed in SEEDS {
        s.t("FLUSHALL", ok()).await;
        let mut rng = Rng(seed);
        let mut m = Model { keys: BTreeMap::new() };
        for i in 0..STEPS_PER_SEED {
            let (args, want) = step(&mut rng, &mut m, now_s);
            let got = s.raw(&args).await;
            let cmd = args.iter().map(|a| show(a)).collect::<Vec<_>>().join(" ");
            *seen.entry(category(&got)).or_default() += 1;
            match want {
                Want::Exact(want) => assert_eq!(show(&got), show(&want), "seed {seed} step {i}: `{cmd}`"),
                // Any reply; the key is read back (an error changed nothing).
                Want::Resync(key) => resync(&mut s, &mut m, &key).await,
            }
            if i % 250 == 249 {
                check_state(&mut s, &m, seed, i).await;
            }
            total += 1;
        }
        check_state(&mut s, &m, seed, STEPS_PER_SEED).await;
        s.t("WAIT 1 5000", int(1)).await;
        pair.wait_for_sync(Duration::from_secs(10)).await.expect("sync");
        let primary = snapshot(&mut s).await;
        let mut r = Session::new(pair.replica()).await;
        let replica = snapshot(&mut r).await;
        assert_same_data(&primary, &replica, 1_000);
    }
    assert_eq!(total, SEEDS.len() * STEPS_PER_SEED);
    // The sequences must actually reach every kind of outcome.
    for kind in [
        "+OK",
        "-ERR syntax error",
        "-WRONGTYPE",
        "-ERR update version is stale",
        "-ERR version should be integer",
        "-ERR value is not an integer",
        "-ERR value is not a float",
        "-ERR increment or decrement would overflow",
        "-ERR min or max is specified, but not valid",
        "nil",
        "CAS_FAILED",
        "EXCAS OK",
        ":-1",
        ":0",
        ":1",
        "int",
        "bulk",
        "array",
    ] {
        let n = seen.get(kind).copied().unwrap_or(0);
        assert!(n >= 5, "outcome {kind:?} seen only {n} times: {seen:?}");
    }
    eprintln!("outcomes: {seen:?}");
}

fn category(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply);
    let line = text.lines().next().unwrap_or_default();
    match reply.first() {
        Some(b'-') if line.starts_with("-WRONGTYPE") => "-WRONGTYPE".into(),
        Some(b'-') => line.into(),
        Some(b'+') => line.into(),
        Some(b':') if matches!(line, ":-1" | ":0" | ":1") => line.into(),
        Some(b':') => "int".into(),
        Some(b'$') if line == "$-1" => "nil".into(),
        Some(b'$') => "bulk".into(),
        Some(b'*') if text.contains("CAS_FAILED") => "CAS_FAILED".into(),
        Some(b'*') if text.starts_with("*3\r\n+OK\r\n+\r\n") => "EXCAS OK".into(),
        Some(b'*') => "array".into(),
        _ => "other".into(),
    }
}
