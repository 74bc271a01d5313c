//! The middle of the pipeline: the flow table with rates and elephants ([`flows`]), the pipeline over a capture ([`analysis`]), and the capture views over time ([`timeline`], [`training`]).

pub mod analysis;
pub mod flows;
pub mod timeline;
pub mod training;
