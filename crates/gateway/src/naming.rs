//! Exposed names (placeholder).
#[derive(Debug)]
pub struct NameTable { names: Vec<String>, collisions: Vec<String> }
impl NameTable {
    pub fn build(sep: &str, items: &[(String, String)]) -> Self {
        Self { names: items.iter().map(|(s, n)| format!("{s}{sep}{n}")).collect(), collisions: Vec::new() }
    }
    pub fn exposed(&self, i: usize) -> &str { &self.names[i] }
    pub fn collisions(&self) -> &[String] { &self.collisions }
}
