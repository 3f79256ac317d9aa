//! placeholder: the codec (helper)
