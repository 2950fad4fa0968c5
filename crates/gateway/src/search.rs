//! Tool search (placeholder).
#[derive(Debug)]
pub struct Index { docs: Vec<(String, String)> }
impl Index {
    pub fn new(docs: &[(String, String)]) -> Self { Self { docs: docs.to_vec() } }
    pub fn search(&self, query: &str, limit: usize) -> Vec<(usize, f64)> {
        self.docs.iter().enumerate().filter(|(_, d)| d.0.contains(query) || d.1.contains(query)).map(|(i, _)| (i, 1.0)).take(limit).collect()
    }
}
