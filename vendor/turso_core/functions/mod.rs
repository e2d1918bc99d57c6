pub mod datetime;
pub mod math;
pub mod printf;
pub mod string;
