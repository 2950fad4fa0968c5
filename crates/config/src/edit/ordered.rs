//! A JSON value tree that keeps every object's keys in the order they were
//! written, so that rewriting a file moves nothing the edit did not touch.
//! (`serde_json::Value` sorts keys unless its `preserve_order` feature is
//! on, which would change every other user of serde_json in the build.)

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Number, Value};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ordered {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl Ordered {
    pub fn get(&self, key: &str) -> Option<&Ordered> {
        self.as_object()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Ordered> {
        match self {
            Ordered::Object(members) => members.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Vec<(String, Ordered)>> {
        match self {
            Ordered::Object(members) => Some(members),
            _ => None,
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` in an object: in its place when present, else last.
    /// `false` when this is not an object.
    pub fn insert(&mut self, key: &str, value: Ordered) -> bool {
        let Ordered::Object(members) = self else {
            return false;
        };
        match members.iter_mut().find(|(k, _)| k == key) {
            Some((_, old)) => *old = value,
            None => members.push((key.to_owned(), value)),
        }
        true
    }
}

impl From<&Value> for Ordered {
    fn from(value: &Value) -> Self {
        match value {
            Value::Null => Ordered::Null,
            Value::Bool(b) => Ordered::Bool(*b),
            Value::Number(n) => Ordered::Number(n.clone()),
            Value::String(s) => Ordered::String(s.clone()),
            Value::Array(items) => Ordered::Array(items.iter().map(Ordered::from).collect()),
            Value::Object(map) => Ordered::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), Ordered::from(v)))
                    .collect(),
            ),
        }
    }
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Ordered::Null => serializer.serialize_unit(),
            Ordered::Bool(b) => serializer.serialize_bool(*b),
            Ordered::Number(n) => n.serialize(serializer),
            Ordered::String(s) => serializer.serialize_str(s),
            Ordered::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Ordered::Object(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (k, v) in members {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(OrderedVisitor)
    }
}

struct OrderedVisitor;

impl<'de> Visitor<'de> for OrderedVisitor {
    type Value = Ordered;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Ordered, E> {
        Ok(Ordered::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Ordered, E> {
        Ok(Ordered::Number(n.into()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Ordered, E> {
        Ok(Ordered::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Ordered, E> {
        Ok(Number::from_f64(n).map_or(Ordered::Null, Ordered::Number))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Ordered, E> {
        Ok(Ordered::String(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Ordered, E> {
        Ok(Ordered::String(s))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Ordered, E> {
        Ok(Ordered::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Ordered, E> {
        Ok(Ordered::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Ordered::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
        let mut members: Vec<(String, Ordered)> = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Ordered>()? {
            // A repeated key: the last value wins, in the first one's place
            // (what a reader of the file sees).
            match members.iter_mut().find(|(k, _)| *k == key) {
                Some((_, old)) => *old = value,
                None => members.push((key, value)),
            }
        }
        Ok(Ordered::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_through_a_round_trip() {
        let text = r#"{"z":1,"a":{"y":[true,null,1.5,"s"],"b":-2},"m":{}}"#;
        let tree: Ordered = serde_json::from_str(text).expect("parses");
        assert_eq!(serde_json::to_string(&tree).expect("writes"), text);
        assert_eq!(
            tree.get("a").and_then(|a| a.get("b")),
            Some(&Ordered::Number((-2).into()))
        );
        let dup: Ordered = serde_json::from_str(r#"{"a":1,"b":2,"a":3}"#).expect("parses");
        assert_eq!(
            serde_json::to_string(&dup).expect("writes"),
            r#"{"a":3,"b":2}"#
        );
    }
}
