//! Values addressed by a small index that is reused once freed: the tags a layer's engine
//! gives the engine below it.

/// A slab of values, with a count of those present.
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
    len: usize,
}

impl<T> Slab<T> {
    /// An empty slab.
    pub fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Stores `value` and returns its index.
    pub fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(value);
                i
            }
            None => {
                self.slots.push(Some(value));
                self.slots.len() - 1
            }
        }
    }

    /// Removes and returns the value at `i`, if any.
    pub fn take(&mut self, i: usize) -> Option<T> {
        let value = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        self.len -= 1;
        Some(value)
    }

    /// The value at `i`, if any.
    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i)?.as_ref()
    }

    /// The value at `i`, if any.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i)?.as_mut()
    }

    /// Values present.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no value is present.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every value.
    pub fn drain(&mut self) -> Vec<T> {
        self.free.clear();
        self.free.extend(0..self.slots.len());
        self.len = 0;
        self.slots.iter_mut().filter_map(Option::take).collect()
    }

    /// The values present.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self::new()
    }
}
