//! Who serves a model and the rules of its prompt cache, from the model
//! table.
