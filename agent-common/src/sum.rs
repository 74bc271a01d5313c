//! Element-wise sums of counter arrays: merging per-CPU values, per-queue tallies, several
//! captures (a leaf: the counter block, the flow record and the agent's views all merge this
//! way).

/// Adds `from` into `into`, element by element (the shorter length bounds it).
#[inline]
pub fn add_all(into: &mut [u64], from: &[u64]) {
    for (x, y) in into.iter_mut().zip(from) {
        *x += y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_element_by_element() {
        let mut a = [1, 2, 3];
        add_all(&mut a, &[10, 20, 30]);
        assert_eq!(a, [11, 22, 33]);
    }
}
