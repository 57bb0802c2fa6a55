//! Finds the first NaN or infinity in any `Serialize` value, with its path (`$.runs[3].p99`).
//!
//! JSON has no NaN or infinity and serde_json silently writes `null` for them, which a reader
//! would mistake for "absent". The JSON exporter runs this check first and refuses instead.

use serde::ser::{self, Serialize};
use std::fmt;

/// The path and value of the first non-finite float in `value`, if any.
pub(crate) fn first_non_finite<T: Serialize + ?Sized>(value: &T) -> Option<(String, f64)> {
    let mut finder = Finder {
        path: vec![],
        found: None,
    };
    // The only error the finder produces is its own "stop" signal.
    let _ = value.serialize(&mut finder);
    finder.found
}

enum Seg {
    Field(String),
    Index(usize),
}

struct Finder {
    path: Vec<Seg>,
    found: Option<(String, f64)>,
}

impl Finder {
    fn path_string(&self) -> String {
        let mut s = String::from("$");
        for seg in &self.path {
            match seg {
                Seg::Field(f) => {
                    s.push('.');
                    s.push_str(f);
                }
                Seg::Index(i) => s.push_str(&format!("[{i}]")),
            }
        }
        s
    }
    fn float(&mut self, v: f64) -> Result<(), Stop> {
        if v.is_finite() {
            Ok(())
        } else {
            self.found = Some((self.path_string(), v));
            Err(Stop)
        }
    }
    fn nested<T: Serialize + ?Sized>(&mut self, seg: Seg, value: &T) -> Result<(), Stop> {
        self.path.push(seg);
        let r = value.serialize(&mut *self);
        self.path.pop();
        r
    }
}

/// Stops the walk at the first non-finite float (or a custom serialisation error).
#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stop")
    }
}
impl std::error::Error for Stop {}
impl ser::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Stop
    }
}

/// A sequence or map walker that numbers elements and names map entries by their key.
struct Compound<'a> {
    finder: &'a mut Finder,
    index: usize,
    /// Whether `new` pushed a variant segment that `end` must pop.
    variant: bool,
}

fn key_name<K: Serialize + ?Sized>(key: &K) -> String {
    match serde_json::to_value(key) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => "<key>".to_string(),
    }
}

macro_rules! ok_scalars {
    ($($name:ident: $ty:ty),*) => {
        $(fn $name(self, _: $ty) -> Result<(), Stop> { Ok(()) })*
    };
}

impl<'a> ser::Serializer for &'a mut Finder {
    type Ok = ();
    type Error = Stop;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    ok_scalars!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_char: char, serialize_str: &str, serialize_bytes: &[u8]);

    fn serialize_f32(self, v: f32) -> Result<(), Stop> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Stop> {
        self.float(v)
    }
    fn serialize_none(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Stop> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Stop> {
        self.nested(Seg::Field(variant.to_string()), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, Some(variant)))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, None))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Stop> {
        Ok(Compound::new(self, Some(variant)))
    }
}

impl<'a> Compound<'a> {
    /// A variant's fields sit under the variant's name, as serde_json writes them.
    fn new(finder: &'a mut Finder, variant: Option<&str>) -> Self {
        if let Some(v) = variant {
            finder.path.push(Seg::Field(v.to_string()));
        }
        Compound {
            finder,
            index: 0,
            variant: variant.is_some(),
        }
    }
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let i = self.index;
        self.index += 1;
        self.finder.nested(Seg::Index(i), value)
    }
    fn end(self) -> Result<(), Stop> {
        if self.variant {
            self.finder.path.pop();
        }
        Ok(())
    }
}

macro_rules! seq_like {
    ($($tr:ident :: $method:ident),*) => {
        $(impl ser::$tr for Compound<'_> {
            type Ok = ();
            type Error = Stop;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
                self.element(value)
            }
            fn end(self) -> Result<(), Stop> {
                Compound::end(self)
            }
        })*
    };
}
seq_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Stop;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Stop> {
        // Keys are strings or numbers in JSON; a float key is checked like any value.
        key.serialize(&mut *self.finder)?;
        self.finder.path.push(Seg::Field(key_name(key)));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Stop> {
        let r = value.serialize(&mut *self.finder);
        self.finder.path.pop();
        r
    }
    fn end(self) -> Result<(), Stop> {
        Compound::end(self)
    }
}

macro_rules! struct_like {
    ($($tr:ident),*) => {
        $(impl ser::$tr for Compound<'_> {
            type Ok = ();
            type Error = Stop;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Stop> {
                self.finder.nested(Seg::Field(key.to_string()), value)
            }
            fn end(self) -> Result<(), Stop> {
                Compound::end(self)
            }
        })*
    };
}
struct_like!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    struct Run {
        name: String,
        p99: f64,
        extra: Option<f32>,
    }

    #[derive(serde::Serialize)]
    enum Shape {
        Point { x: f64 },
        Pair(f64, f64),
    }

    #[test]
    fn finds_nothing_in_finite_data() {
        let runs = vec![Run {
            name: "a".into(),
            p99: 1.0,
            extra: None,
        }];
        assert_eq!(first_non_finite(&runs), None);
    }

    #[test]
    fn names_struct_and_index_path() {
        let runs = vec![
            Run {
                name: "a".into(),
                p99: 1.0,
                extra: Some(2.0),
            },
            Run {
                name: "b".into(),
                p99: f64::NAN,
                extra: None,
            },
        ];
        let (path, v) = first_non_finite(&runs).unwrap();
        assert_eq!(path, "$[1].p99");
        assert!(v.is_nan());
        let runs = vec![Run {
            name: "a".into(),
            p99: 1.0,
            extra: Some(f32::INFINITY),
        }];
        assert_eq!(first_non_finite(&runs).unwrap().0, "$[0].extra");
    }

    #[test]
    fn names_map_keys_and_variants() {
        let mut m = BTreeMap::new();
        m.insert("ok", vec![1.0]);
        m.insert("ttft", vec![1.0, f64::NEG_INFINITY]);
        assert_eq!(first_non_finite(&m).unwrap().0, "$.ttft[1]");
        let shapes = vec![Shape::Pair(1.0, 2.0), Shape::Point { x: f64::NAN }];
        assert_eq!(first_non_finite(&shapes).unwrap().0, "$[1].Point.x");
        let shapes = vec![Shape::Pair(1.0, f64::NAN)];
        assert_eq!(first_non_finite(&shapes).unwrap().0, "$[0].Pair[1]");
    }
}
