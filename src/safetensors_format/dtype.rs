//! Torch dtypes and safetensors dtypes, mapped both ways as
//! `safetensors.torch` maps them.

use super::Dtype;
use crate::DType;

/// The safetensors dtype of `dtype`, as `safetensors.torch` names it;
/// `None` for those it has none for (`complex32`, `complex128`,
/// `bcomplex32`, the `bits` dtypes). `float4_e2m1fn_x2` is `F4`, with two
/// `F4` elements per torch element in the last dimension.
pub fn to_safetensors_dtype(dtype: DType) -> Option<Dtype> {
    Some(match dtype {
        DType::Bool => Dtype::BOOL,
        DType::UInt8 => Dtype::U8,
        DType::UInt16 => Dtype::U16,
        DType::UInt32 => Dtype::U32,
        DType::UInt64 => Dtype::U64,
        DType::Int8 => Dtype::I8,
        DType::Int16 => Dtype::I16,
        DType::Int32 => Dtype::I32,
        DType::Int64 => Dtype::I64,
        DType::Float16 => Dtype::F16,
        DType::BFloat16 => Dtype::BF16,
        DType::Float32 => Dtype::F32,
        DType::Float64 => Dtype::F64,
        DType::Complex64 => Dtype::C64,
        DType::Float8E4M3Fn => Dtype::F8_E4M3,
        DType::Float8E4M3FnUz => Dtype::F8_E4M3FNUZ,
        DType::Float8E5M2 => Dtype::F8_E5M2,
        DType::Float8E5M2FnUz => Dtype::F8_E5M2FNUZ,
        DType::Float8E8M0Fnu => Dtype::F8_E8M0,
        DType::Float4E2M1FnX2 => Dtype::F4,
        // complex32, complex128, bcomplex32, the bits dtypes, and any
        // dtype torch adds later until it is mapped here.
        _ => return None,
    })
}

/// The torch dtype of a safetensors `dtype`; `None` for the 6-bit floats,
/// which torch does not have.
pub fn to_torch_dtype(dtype: Dtype) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|&candidate| to_safetensors_dtype(candidate) == Some(dtype))
}

#[cfg(test)]
mod tests {
    use super::{to_safetensors_dtype, to_torch_dtype};
    use crate::DType;
    use crate::model::Value;
    use crate::safetensors_format::SafetensorsError;
    use crate::safetensors_format::tests::{dict, get, tensor};
    use crate::safetensors_format::tests::{from_bytes, to_bytes};

    #[test]
    fn every_mapped_dtype_round_trips_and_the_rest_are_refused() {
        for dtype in DType::ALL {
            let size = dtype.element_size();
            let bytes: Vec<u8> = (0..6 * size).map(|i| i as u8).collect();
            let state_dict = dict(vec![(
                "x",
                Value::Tensor(tensor(dtype, &[2, 3], bytes.clone())),
            )]);
            match to_safetensors_dtype(dtype) {
                Some(expected) => {
                    let file = to_bytes(&state_dict).unwrap();
                    let header = String::from_utf8_lossy(&file[8..]).into_owned();
                    assert!(
                        header.contains(&format!("\"dtype\":\"{expected}\"")),
                        "{header}"
                    );
                    let back = get(&from_bytes(&file).unwrap(), "x");
                    assert_eq!(back.dtype(), dtype);
                    assert_eq!(back.sizes(), &[2, 3]);
                    assert_eq!(back.storage().bytes().unwrap(), &bytes[..]);
                    assert_eq!(to_torch_dtype(expected), Some(dtype));
                }
                None => {
                    let error = to_bytes(&state_dict).unwrap_err();
                    assert!(
                        matches!(error, SafetensorsError::NoSafetensorsDtype { .. }),
                        "{error}"
                    );
                    assert!(
                        error.to_string().contains(dtype.name())
                            && error.to_string().contains("`x`"),
                        "{error}"
                    );
                }
            }
        }
    }
}
