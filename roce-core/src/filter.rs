//! `--filter`: a small expression language over decoded frames.
//!
//! ```text
//! expr    := or
//! or      := and ("or" and)*          also "||"
//! and     := unary ("and" unary)*     also "&&"
//! unary   := ("not" | "!") unary | "(" expr ")" | test
//! test    := KIND | FIELD OP VALUE
//! KIND    := roce | cnp | pfc | pause | other     (a bare kind means kind == KIND)
//! FIELD   := kind | qp | src | dst | ip | opcode | psn | ecn | dscp | vlan | pcp | sport | icrc
//! OP      := == | != | < | <= | > | >=            (ordering only for numeric fields)
//! ```
//! `ip` matches either address. `qp` is the BTH destination QP. `opcode` takes a number or a name such as
//! `RC_SEND_FIRST` (case-insensitive). `ecn` takes 0–3 or `not-ect`, `ect1`, `ect0`, `ce`. `icrc` takes `ok`,
//! `bad` or `unknown`. Numbers may be decimal or 0x-hex. A field a frame does not have never matches, except
//! under `!=`, which then matches (as in "not equal to").
//! Example: `cnp or (roce and ecn == ce and qp == 0x118)`.

use std::net::IpAddr;

use roce_wire::Opcode;
use thiserror::Error;

use crate::decode::{Frame, Kind};

/// A `--filter` expression that does not parse.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("filter: {msg} at position {pos}")]
pub struct FilterError {
    /// Byte offset into the expression, so the command line can point at the mistake.
    pub pos: usize,
    /// What was expected or what was wrong there.
    pub msg: String,
}

/// A frame property a test compares; see the grammar above for the names users type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The decoded frame kind (`roce`, `cnp`, `pfc`, `pause`, `other`).
    Kind,
    /// The BTH destination QP.
    Qp,
    /// The IP source address.
    Src,
    /// The IP destination address.
    Dst,
    /// Either IP address.
    Ip,
    /// The BTH opcode.
    Opcode,
    /// The BTH packet sequence number.
    Psn,
    /// The IP ECN codepoint.
    Ecn,
    /// The IP DSCP.
    Dscp,
    /// The outer VLAN id.
    Vlan,
    /// The outer VLAN tag's priority code point.
    Pcp,
    /// The UDP source port (the ECMP entropy of RoCEv2).
    Sport,
    /// The ICRC verdict.
    Icrc,
}

/// A comparison; the ordering ones apply to numeric fields only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`, which also matches a frame without the field.
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// The right-hand side of a test, already parsed for its field so evaluation does no parsing per frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A number (decimal or 0x-hex, opcode and ECN names resolved).
    Num(u64),
    /// An IPv4 or IPv6 address.
    Ip(IpAddr),
    /// A frame kind.
    Kind(Kind),
    /// An ICRC verdict: checked good, checked bad, or not checkable (`None`).
    Icrc(Option<bool>),
}

/// A parsed filter, evaluated per frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Both sides match.
    And(Box<Filter>, Box<Filter>),
    /// Either side matches.
    Or(Box<Filter>, Box<Filter>),
    /// The inner expression does not match.
    Not(Box<Filter>),
    /// One comparison of a frame's field with a value.
    Test(Field, Op, Value),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Op(Op),
    LParen,
    RParen,
    And,
    Or,
    Not,
}

fn lex(s: &str) -> Result<Vec<(usize, Tok)>, FilterError> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let two = b.get(i..i + 2);
        let tok = match c {
            b' ' | b'\t' | b'\n' => {
                i += 1;
                continue;
            }
            b'(' => {
                i += 1;
                Tok::LParen
            }
            b')' => {
                i += 1;
                Tok::RParen
            }
            _ if two == Some(b"==") => {
                i += 2;
                Tok::Op(Op::Eq)
            }
            _ if two == Some(b"!=") => {
                i += 2;
                Tok::Op(Op::Ne)
            }
            _ if two == Some(b"<=") => {
                i += 2;
                Tok::Op(Op::Le)
            }
            _ if two == Some(b">=") => {
                i += 2;
                Tok::Op(Op::Ge)
            }
            _ if two == Some(b"&&") => {
                i += 2;
                Tok::And
            }
            _ if two == Some(b"||") => {
                i += 2;
                Tok::Or
            }
            b'<' => {
                i += 1;
                Tok::Op(Op::Lt)
            }
            b'>' => {
                i += 1;
                Tok::Op(Op::Gt)
            }
            b'!' => {
                i += 1;
                Tok::Not
            }
            _ => {
                while i < b.len() && !b" \t\n()=!<>&|".contains(&b[i]) {
                    i += 1;
                }
                if i == start {
                    return Err(FilterError {
                        pos: start,
                        msg: format!("unexpected character {:?}", c as char),
                    });
                }
                let w = &s[start..i];
                match w.to_ascii_lowercase().as_str() {
                    "and" => Tok::And,
                    "or" => Tok::Or,
                    "not" => Tok::Not,
                    _ => Tok::Word(w.to_string()),
                }
            }
        };
        out.push((start, tok));
    }
    Ok(out)
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    at: usize,
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(_, t)| t)
    }
    fn pos(&self) -> usize {
        self.toks.get(self.at).map_or(self.end, |(p, _)| *p)
    }
    fn err<T>(&self, msg: impl Into<String>) -> Result<T, FilterError> {
        Err(FilterError {
            pos: self.pos(),
            msg: msg.into(),
        })
    }

    fn or(&mut self) -> Result<Filter, FilterError> {
        let mut l = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.at += 1;
            l = Filter::Or(Box::new(l), Box::new(self.and()?));
        }
        Ok(l)
    }

    fn and(&mut self) -> Result<Filter, FilterError> {
        let mut l = self.unary()?;
        while self.peek() == Some(&Tok::And) {
            self.at += 1;
            l = Filter::And(Box::new(l), Box::new(self.unary()?));
        }
        Ok(l)
    }

    fn unary(&mut self) -> Result<Filter, FilterError> {
        match self.peek().cloned() {
            Some(Tok::Not) => {
                self.at += 1;
                Ok(Filter::Not(Box::new(self.unary()?)))
            }
            Some(Tok::LParen) => {
                self.at += 1;
                let e = self.or()?;
                if self.peek() != Some(&Tok::RParen) {
                    return self.err("expected ')'");
                }
                self.at += 1;
                Ok(e)
            }
            Some(Tok::Word(w)) => {
                let pos = self.pos();
                self.at += 1;
                if let Some(kind) = parse_kind(&w) {
                    if !matches!(self.peek(), Some(Tok::Op(_))) {
                        return Ok(Filter::Test(Field::Kind, Op::Eq, Value::Kind(kind)));
                    }
                }
                let field = parse_field(&w).ok_or_else(|| FilterError {
                    pos,
                    msg: format!(
                        "unknown field {w:?} (fields: kind qp src dst ip opcode psn ecn dscp vlan pcp sport icrc)"
                    ),
                })?;
                let Some(Tok::Op(op)) = self.peek().cloned() else {
                    return self.err(format!("expected an operator after {w:?}"));
                };
                self.at += 1;
                let vpos = self.pos();
                let Some(Tok::Word(v)) = self.peek().cloned() else {
                    return self.err("expected a value");
                };
                self.at += 1;
                let value = parse_value(field, &v).map_err(|msg| FilterError { pos: vpos, msg })?;
                if !matches!(op, Op::Eq | Op::Ne) && !matches!(value, Value::Num(_)) {
                    return Err(FilterError {
                        pos: vpos,
                        msg: format!("{w} can only be compared with == or !="),
                    });
                }
                Ok(Filter::Test(field, op, value))
            }
            _ => self.err("expected a test, 'not' or '('"),
        }
    }
}

fn parse_kind(w: &str) -> Option<Kind> {
    Kind::ALL
        .into_iter()
        .find(|k| k.as_str().eq_ignore_ascii_case(w))
}

fn parse_field(w: &str) -> Option<Field> {
    Some(match w.to_ascii_lowercase().as_str() {
        "kind" => Field::Kind,
        "qp" | "dest_qp" => Field::Qp,
        "src" => Field::Src,
        "dst" => Field::Dst,
        "ip" => Field::Ip,
        "opcode" => Field::Opcode,
        "psn" => Field::Psn,
        "ecn" => Field::Ecn,
        "dscp" => Field::Dscp,
        "vlan" => Field::Vlan,
        "pcp" => Field::Pcp,
        "sport" => Field::Sport,
        "icrc" => Field::Icrc,
        _ => return None,
    })
}

fn parse_num(v: &str) -> Result<u64, String> {
    let r = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| format!("{v:?} is not a number"))
}

fn parse_value(field: Field, v: &str) -> Result<Value, String> {
    let lower = v.to_ascii_lowercase();
    match field {
        Field::Kind => parse_kind(v)
            .map(Value::Kind)
            .ok_or_else(|| format!("{v:?} is not a kind (roce cnp pfc pause other)")),
        Field::Src | Field::Dst | Field::Ip => v
            .parse()
            .map(Value::Ip)
            .map_err(|_| format!("{v:?} is not an IP address")),
        Field::Ecn => match lower.as_str() {
            "not-ect" | "notect" => Ok(Value::Num(0)),
            "ect1" | "ect(1)" => Ok(Value::Num(1)),
            "ect0" | "ect(0)" => Ok(Value::Num(2)),
            "ce" => Ok(Value::Num(3)),
            _ => parse_num(v).map(Value::Num),
        },
        Field::Icrc => match lower.as_str() {
            "ok" => Ok(Value::Icrc(Some(true))),
            "bad" => Ok(Value::Icrc(Some(false))),
            "unknown" => Ok(Value::Icrc(None)),
            _ => Err(format!("{v:?}: icrc is ok, bad or unknown")),
        },
        Field::Opcode => {
            if let Ok(n) = parse_num(v) {
                return Ok(Value::Num(n));
            }
            (0..=255u8)
                .map(Opcode)
                .find(|o| o.is_defined() && o.name().eq_ignore_ascii_case(v))
                .map(|o| Value::Num(u64::from(o.0)))
                .ok_or_else(|| format!("{v:?} is not an opcode name such as RC_SEND_FIRST"))
        }
        _ => parse_num(v).map(Value::Num),
    }
}

impl std::str::FromStr for Filter {
    type Err = FilterError;

    fn from_str(s: &str) -> Result<Self, FilterError> {
        let mut p = Parser {
            toks: lex(s)?,
            at: 0,
            end: s.len(),
        };
        let f = p.or()?;
        if p.at != p.toks.len() {
            return p.err("unexpected text after the expression");
        }
        Ok(f)
    }
}

fn cmp<T: Ord>(op: Op, a: T, b: T) -> bool {
    match op {
        Op::Eq => a == b,
        Op::Ne => a != b,
        Op::Lt => a < b,
        Op::Le => a <= b,
        Op::Gt => a > b,
        Op::Ge => a >= b,
    }
}

impl Filter {
    /// Evaluates the expression on one frame; a field the frame lacks fails every test but `!=`.
    pub fn matches(&self, f: &Frame<'_>) -> bool {
        match self {
            Filter::And(a, b) => a.matches(f) && b.matches(f),
            Filter::Or(a, b) => a.matches(f) || b.matches(f),
            Filter::Not(a) => !a.matches(f),
            Filter::Test(field, op, value) => test(f, *field, *op, value),
        }
    }
}

fn test(f: &Frame<'_>, field: Field, op: Op, value: &Value) -> bool {
    let missing = op == Op::Ne;
    match (field, value) {
        (Field::Kind, Value::Kind(k)) => cmp(op, f.kind, *k),
        (Field::Src | Field::Dst | Field::Ip, Value::Ip(a)) => match f.ip {
            Some(ip) => match field {
                Field::Src => cmp(op, ip.src, *a),
                Field::Dst => cmp(op, ip.dst, *a),
                // "ip == A": either side is A; "ip != A": neither side is.
                _ if op == Op::Ne => ip.src != *a && ip.dst != *a,
                _ => ip.src == *a || ip.dst == *a,
            },
            None => missing,
        },
        (Field::Icrc, Value::Icrc(want)) => match f.roce {
            Some(r) => cmp(op, r.icrc.as_option(), *want),
            None => missing,
        },
        (_, Value::Num(n)) => {
            let have: Option<u64> = match field {
                Field::Qp => f.bth().map(|b| u64::from(b.dest_qp)),
                Field::Opcode => f.bth().map(|b| u64::from(b.opcode.0)),
                Field::Psn => f.bth().map(|b| u64::from(b.psn)),
                Field::Ecn => f.ip.map(|i| u64::from(i.ecn)),
                Field::Dscp => f.ip.map(|i| u64::from(i.dscp)),
                Field::Vlan => f.vlan.map(u64::from),
                Field::Pcp => f.pcp.map(u64::from),
                Field::Sport => f.roce.and_then(|r| r.sport).map(u64::from),
                _ => None,
            };
            match have {
                Some(h) => cmp(op, h, *n),
                None => missing,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_grouping() {
        let f: Filter = "cnp or roce and ecn == ce".parse().unwrap();
        assert!(matches!(f, Filter::Or(_, _)));
        let g: Filter = "(cnp or roce) and not ecn == ce".parse().unwrap();
        assert!(matches!(g, Filter::And(_, _)));
    }

    #[test]
    fn values_parse() {
        assert!(
            "qp == 0x118 && opcode == rc_send_first"
                .parse::<Filter>()
                .is_ok()
        );
        assert!("ip == fe80::1 || src == 10.0.0.1".parse::<Filter>().is_ok());
        assert!("psn >= 100 and pcp != 3".parse::<Filter>().is_ok());
    }

    #[test]
    fn errors_say_where() {
        let e = "qp == zz".parse::<Filter>().unwrap_err();
        assert_eq!(e.pos, 6);
        let e = "bogus == 1".parse::<Filter>().unwrap_err();
        assert_eq!(e.pos, 0);
        let e = "(cnp".parse::<Filter>().unwrap_err();
        assert_eq!(e.pos, 4);
        assert!("src < 10.0.0.1".parse::<Filter>().is_err());
        assert!("cnp roce".parse::<Filter>().is_err());
    }
}
