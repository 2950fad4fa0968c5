//! List cache (placeholder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(pub String);
#[derive(Debug)]
pub struct Cache;
impl Cache {
    pub fn put(&self, _key: &Key, _v: &serde_json::Value) -> std::io::Result<()> { Ok(()) }
}
