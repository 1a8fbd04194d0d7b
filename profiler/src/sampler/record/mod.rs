//! Recording: each kernel record taken in turn by the `Recorder`, which unwinds it, files its
//! path, and hands its data address, allocation or probe hit to the data room.

pub(crate) mod recorder;
