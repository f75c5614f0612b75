//! torch's CPU dtypes: wire names, element sizes and element decoding.

/// A torch dtype, named as `torch.<name>` on the wire (e.g. `torch.float32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// `torch.bool`
    Bool,
    /// `torch.uint8`
    UInt8,
    /// `torch.uint16`
    UInt16,
    /// `torch.uint32`
    UInt32,
    /// `torch.uint64`
    UInt64,
    /// `torch.int8`
    Int8,
    /// `torch.int16`
    Int16,
    /// `torch.int32`
    Int32,
    /// `torch.int64`
    Int64,
    /// `torch.float16`
    Float16,
    /// `torch.bfloat16`
    BFloat16,
    /// `torch.float32`
    Float32,
    /// `torch.float64`
    Float64,
    /// `torch.complex32`
    Complex32,
    /// `torch.complex64`
    Complex64,
    /// `torch.complex128`
    Complex128,
    /// `torch.float8_e4m3fn`
    Float8E4M3Fn,
    /// `torch.float8_e4m3fnuz`
    Float8E4M3FnUz,
    /// `torch.float8_e5m2`
    Float8E5M2,
    /// `torch.float8_e5m2fnuz`
    Float8E5M2FnUz,
    /// `torch.float8_e8m0fnu`
    Float8E8M0Fnu,
    /// `torch.float4_e2m1fn_x2`: two 4-bit floats packed in one byte.
    Float4E2M1FnX2,
    /// `torch.bcomplex32`: a complex of two bfloat16.
    BComplex32,
    /// `torch.bits1x8`: opaque bits.
    Bits1x8,
    /// `torch.bits2x4`: opaque bits.
    Bits2x4,
    /// `torch.bits4x2`: opaque bits.
    Bits4x2,
    /// `torch.bits8`: opaque bits.
    Bits8,
    /// `torch.bits16`: opaque bits.
    Bits16,
    /// `torch.uint1`: an unsigned 1-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    UInt1,
    /// `torch.uint2`: an unsigned 2-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    UInt2,
    /// `torch.uint3`: an unsigned 3-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    UInt3,
    /// `torch.uint4`: an unsigned 4-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    UInt4,
    /// `torch.uint5`: an unsigned 5-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    UInt5,
    /// `torch.uint6`: an unsigned 6-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    UInt6,
    /// `torch.uint7`: an unsigned 7-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    UInt7,
    /// `torch.int1`: a signed 1-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    Int1,
    /// `torch.int2`: a signed 2-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    Int2,
    /// `torch.int3`: a signed 3-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    Int3,
    /// `torch.int4`: a signed 4-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    Int4,
    /// `torch.int5`: a signed 5-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    Int5,
    /// `torch.int6`: a signed 6-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    Int6,
    /// `torch.int7`: a signed 7-bit integer stored one a byte, which
    /// torch shares and copies but does not compute with.
    Int7,
    /// `torch.qint8`: quantized signed 8-bit integers, as a plain tensor of that dtype
    /// carries them (its bytes, no quantizer).
    QInt8,
    /// `torch.quint8`: quantized unsigned 8-bit integers, as a plain tensor of that dtype
    /// carries them (its bytes, no quantizer).
    QUInt8,
    /// `torch.qint32`: quantized signed 32-bit integers, as a plain tensor of that dtype
    /// carries them (its bytes, no quantizer).
    QInt32,
    /// `torch.quint4x2`: two quantized unsigned 4-bit integers a byte, as a plain tensor of that dtype
    /// carries them (its bytes, no quantizer).
    QUInt4x2,
    /// `torch.quint2x4`: four quantized unsigned 2-bit integers a byte, as a plain tensor of that dtype
    /// carries them (its bytes, no quantizer).
    QUInt2x4,
}

/// One element, widened to a type that holds every value of its dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// A `bool` element.
    Bool(bool),
    /// A signed integer element.
    Int(i64),
    /// An unsigned integer element.
    UInt(u64),
    /// A floating-point element, converted exactly to `f64`.
    Float(f64),
    /// A complex element: real and imaginary parts.
    Complex(f64, f64),
    /// Two packed 4-bit floats, low nibble first.
    PackedFloat4(f64, f64),
}

/// A minifloat layout: exponent and mantissa widths, bias, and which of the
/// special encodings it has.
struct MiniFloat {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    /// IEEE-style: all-ones exponent is inf (mantissa 0) or NaN.
    ieee_specials: bool,
    /// "fn": only all-ones exponent *and* mantissa is NaN, no inf.
    nan_all_ones: bool,
    /// "fnuz": the negative-zero pattern is the single NaN.
    nan_is_negative_zero: bool,
}

impl MiniFloat {
    /// The layout's precision: the mantissa and its implicit bit, and the
    /// exponent of the least normal value, `1 - bias`.
    const fn significand(&self) -> Significand {
        Significand {
            bits: self.mantissa_bits + 1,
            min_exponent: 1 - self.bias,
        }
    }

    fn decode(&self, bits: u32) -> f64 {
        let total = 1 + self.exponent_bits + self.mantissa_bits;
        let sign_bit = 1 << (total - 1);
        let exponent_mask = (1 << self.exponent_bits) - 1;
        let mantissa_mask = (1 << self.mantissa_bits) - 1;
        let negative = bits & sign_bit != 0;
        let exponent = (bits >> self.mantissa_bits) & exponent_mask;
        let mantissa = bits & mantissa_mask;
        if self.nan_is_negative_zero && bits == sign_bit {
            return f64::NAN;
        }
        if self.nan_all_ones && exponent == exponent_mask && mantissa == mantissa_mask {
            return f64::NAN;
        }
        if self.ieee_specials && exponent == exponent_mask {
            return match (mantissa, negative) {
                (0, false) => f64::INFINITY,
                (0, true) => f64::NEG_INFINITY,
                _ => f64::NAN,
            };
        }
        let scale = f64::from(1u32 << self.mantissa_bits);
        let magnitude = if exponent == 0 {
            f64::from(mantissa) / scale * 2f64.powi(1 - self.bias)
        } else {
            (1.0 + f64::from(mantissa) / scale) * 2f64.powi(exponent as i32 - self.bias)
        };
        if negative { -magnitude } else { magnitude }
    }
}

const FLOAT16: MiniFloat = MiniFloat {
    exponent_bits: 5,
    mantissa_bits: 10,
    bias: 15,
    ieee_specials: true,
    nan_all_ones: false,
    nan_is_negative_zero: false,
};
const FLOAT8_E4M3FN: MiniFloat = MiniFloat {
    exponent_bits: 4,
    mantissa_bits: 3,
    bias: 7,
    ieee_specials: false,
    nan_all_ones: true,
    nan_is_negative_zero: false,
};
const FLOAT8_E4M3FNUZ: MiniFloat = MiniFloat {
    exponent_bits: 4,
    mantissa_bits: 3,
    bias: 8,
    ieee_specials: false,
    nan_all_ones: false,
    nan_is_negative_zero: true,
};
const FLOAT8_E5M2: MiniFloat = MiniFloat {
    exponent_bits: 5,
    mantissa_bits: 2,
    bias: 15,
    ieee_specials: true,
    nan_all_ones: false,
    nan_is_negative_zero: false,
};
const FLOAT8_E5M2FNUZ: MiniFloat = MiniFloat {
    exponent_bits: 5,
    mantissa_bits: 2,
    bias: 16,
    ieee_specials: false,
    nan_all_ones: false,
    nan_is_negative_zero: true,
};
const FLOAT4_E2M1FN: MiniFloat = MiniFloat {
    exponent_bits: 2,
    mantissa_bits: 1,
    bias: 1,
    ieee_specials: false,
    nan_all_ones: false,
    nan_is_negative_zero: false,
};

/// bfloat16 is float32 without its low 16 bits, all of them mantissa.
const BFLOAT16_DROPPED_BITS: u32 = 16;
/// `float8_e8m0fnu` is a bare biased exponent, no sign or mantissa: every
/// encoding but the NaN is `2^(bits - bias)`, none subnormal.
const FLOAT8_E8M0FNU_BIAS: i32 = 127;

impl DType {
    /// Every dtype, in a stable order.
    pub const ALL: [DType; 47] = [
        DType::Bool,
        DType::UInt8,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::Float16,
        DType::BFloat16,
        DType::Float32,
        DType::Float64,
        DType::Complex32,
        DType::Complex64,
        DType::Complex128,
        DType::Float8E4M3Fn,
        DType::Float8E4M3FnUz,
        DType::Float8E5M2,
        DType::Float8E5M2FnUz,
        DType::Float8E8M0Fnu,
        DType::Float4E2M1FnX2,
        DType::BComplex32,
        DType::Bits1x8,
        DType::Bits2x4,
        DType::Bits4x2,
        DType::Bits8,
        DType::Bits16,
        DType::UInt1,
        DType::UInt2,
        DType::UInt3,
        DType::UInt4,
        DType::UInt5,
        DType::UInt6,
        DType::UInt7,
        DType::Int1,
        DType::Int2,
        DType::Int3,
        DType::Int4,
        DType::Int5,
        DType::Int6,
        DType::Int7,
        DType::QInt8,
        DType::QUInt8,
        DType::QInt32,
        DType::QUInt4x2,
        DType::QUInt2x4,
    ];

    /// The torch name, as in `torch.<name>` and `str(dtype)` without the prefix.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::UInt8 => "uint8",
            DType::UInt16 => "uint16",
            DType::UInt32 => "uint32",
            DType::UInt64 => "uint64",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Complex32 => "complex32",
            DType::Complex64 => "complex64",
            DType::Complex128 => "complex128",
            DType::Float8E4M3Fn => "float8_e4m3fn",
            DType::Float8E4M3FnUz => "float8_e4m3fnuz",
            DType::Float8E5M2 => "float8_e5m2",
            DType::Float8E5M2FnUz => "float8_e5m2fnuz",
            DType::Float8E8M0Fnu => "float8_e8m0fnu",
            DType::Float4E2M1FnX2 => "float4_e2m1fn_x2",
            DType::BComplex32 => "bcomplex32",
            DType::Bits1x8 => "bits1x8",
            DType::Bits2x4 => "bits2x4",
            DType::Bits4x2 => "bits4x2",
            DType::Bits8 => "bits8",
            DType::Bits16 => "bits16",
            DType::UInt1 => "uint1",
            DType::UInt2 => "uint2",
            DType::UInt3 => "uint3",
            DType::UInt4 => "uint4",
            DType::UInt5 => "uint5",
            DType::UInt6 => "uint6",
            DType::UInt7 => "uint7",
            DType::Int1 => "int1",
            DType::Int2 => "int2",
            DType::Int3 => "int3",
            DType::Int4 => "int4",
            DType::Int5 => "int5",
            DType::Int6 => "int6",
            DType::Int7 => "int7",
            DType::QInt8 => "qint8",
            DType::QUInt8 => "quint8",
            DType::QInt32 => "qint32",
            DType::QUInt4x2 => "quint4x2",
            DType::QUInt2x4 => "quint2x4",
        }
    }

    /// The dtype for a torch name, accepting torch's aliases
    /// (`float`, `half`, `long`, `cfloat`, ...).
    pub fn from_name(name: &str) -> Option<DType> {
        let canonical = match name {
            "float" => "float32",
            "double" => "float64",
            "half" => "float16",
            "long" => "int64",
            "int" => "int32",
            "short" => "int16",
            "chalf" => "complex32",
            "cfloat" => "complex64",
            "cdouble" => "complex128",
            "bit" => "uint1",
            other => other,
        };
        DType::ALL.into_iter().find(|d| d.name() == canonical)
    }

    /// Bytes per element.
    pub fn element_size(self) -> usize {
        match self {
            DType::Bool
            | DType::UInt8
            | DType::Int8
            | DType::Float8E4M3Fn
            | DType::Float8E4M3FnUz
            | DType::Float8E5M2
            | DType::Float8E5M2FnUz
            | DType::Float8E8M0Fnu
            | DType::Float4E2M1FnX2
            | DType::Bits1x8
            | DType::Bits2x4
            | DType::Bits4x2
            | DType::Bits8
            | DType::UInt1
            | DType::UInt2
            | DType::UInt3
            | DType::UInt4
            | DType::UInt5
            | DType::UInt6
            | DType::UInt7
            | DType::Int1
            | DType::Int2
            | DType::Int3
            | DType::Int4
            | DType::Int5
            | DType::Int6
            | DType::Int7
            | DType::QInt8
            | DType::QUInt8
            | DType::QUInt4x2
            | DType::QUInt2x4 => 1,
            DType::UInt16 | DType::Int16 | DType::Float16 | DType::BFloat16 | DType::Bits16 => 2,
            DType::UInt32
            | DType::Int32
            | DType::Float32
            | DType::Complex32
            | DType::BComplex32
            | DType::QInt32 => 4,
            DType::UInt64 | DType::Int64 | DType::Float64 | DType::Complex64 => 8,
            DType::Complex128 => 16,
        }
    }

    /// The legacy typed-storage class (`torch.FloatStorage`, ...), for the
    /// dtypes that have one.
    pub fn legacy_storage_class(self) -> Option<&'static str> {
        Some(match self {
            DType::Bool => "BoolStorage",
            DType::UInt8 => "ByteStorage",
            DType::Int8 => "CharStorage",
            DType::Int16 => "ShortStorage",
            DType::Int32 => "IntStorage",
            DType::Int64 => "LongStorage",
            DType::Float16 => "HalfStorage",
            DType::BFloat16 => "BFloat16Storage",
            DType::Float32 => "FloatStorage",
            DType::Float64 => "DoubleStorage",
            DType::Complex64 => "ComplexFloatStorage",
            DType::Complex128 => "ComplexDoubleStorage",
            DType::QInt8 => "QInt8Storage",
            DType::QUInt8 => "QUInt8Storage",
            DType::QInt32 => "QInt32Storage",
            DType::QUInt4x2 => "QUInt4x2Storage",
            DType::QUInt2x4 => "QUInt2x4Storage",
            _ => return None,
        })
    }

    /// The dtype of a legacy typed-storage class name (`FloatStorage`, ...).
    pub fn from_legacy_storage_class(class: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.legacy_storage_class() == Some(class))
    }

    /// Decodes one element from its little-endian bytes.
    ///
    /// Returns `None` when `bytes` is not exactly [`element_size`](Self::element_size)
    /// long, and for dtypes whose elements torch itself does not turn into
    /// numbers (`bits*`, `bcomplex32`, the sub-byte integers `uint1` to
    /// `int7`, the quantized `qint8` to `quint2x4`).
    pub fn decode_element(self, bytes: &[u8]) -> Option<Scalar> {
        if bytes.len() != self.element_size() {
            return None;
        }
        let mut wide = [0u8; 8];
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        wide[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
        let bits = u64::from_le_bytes(wide);
        let sign_extend = |bits: u64, width: u32| ((bits << (64 - width)) as i64) >> (64 - width);
        Some(match self {
            DType::Bool => Scalar::Bool(bits != 0),
            DType::UInt8 | DType::UInt16 | DType::UInt32 | DType::UInt64 => Scalar::UInt(bits),
            DType::Int8 => Scalar::Int(sign_extend(bits, 8)),
            DType::Int16 => Scalar::Int(sign_extend(bits, 16)),
            DType::Int32 => Scalar::Int(sign_extend(bits, 32)),
            DType::Int64 => Scalar::Int(bits as i64),
            DType::Float16 => Scalar::Float(FLOAT16.decode(bits as u32)),
            DType::BFloat16 => Scalar::Float(f64::from(f32::from_bits(
                (bits as u32) << BFLOAT16_DROPPED_BITS,
            ))),
            DType::Float32 => Scalar::Float(f64::from(f32::from_bits(bits as u32))),
            DType::Float64 => Scalar::Float(f64::from_bits(bits)),
            DType::Complex32 => Scalar::Complex(
                FLOAT16.decode((bits & 0xffff) as u32),
                FLOAT16.decode(((bits >> 16) & 0xffff) as u32),
            ),
            DType::Complex64 => Scalar::Complex(
                f64::from(f32::from_bits(bits as u32)),
                f64::from(f32::from_bits((bits >> 32) as u32)),
            ),
            DType::Complex128 => Scalar::Complex(
                f64::from_bits(word(&bytes[..8])),
                f64::from_bits(word(&bytes[8..])),
            ),
            DType::Float8E4M3Fn => Scalar::Float(FLOAT8_E4M3FN.decode(bits as u32)),
            DType::Float8E4M3FnUz => Scalar::Float(FLOAT8_E4M3FNUZ.decode(bits as u32)),
            DType::Float8E5M2 => Scalar::Float(FLOAT8_E5M2.decode(bits as u32)),
            DType::Float8E5M2FnUz => Scalar::Float(FLOAT8_E5M2FNUZ.decode(bits as u32)),
            DType::Float8E8M0Fnu => Scalar::Float(if bits == 0xff {
                f64::NAN
            } else {
                2f64.powi(bits as i32 - FLOAT8_E8M0FNU_BIAS)
            }),
            DType::Float4E2M1FnX2 => Scalar::PackedFloat4(
                FLOAT4_E2M1FN.decode((bits & 0xf) as u32),
                FLOAT4_E2M1FN.decode(((bits >> 4) & 0xf) as u32),
            ),
            // bits*, bcomplex32, the sub-byte integers and the quantized
            // kinds: torch turns none of them into numbers.
            _ => return None,
        })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl DType {
    /// The shortest decimal that reads back as `value` in this dtype, as
    /// numpy and torch show an element: a float32 `-0.0037` rather than the
    /// float64 expansion of the same bits, `-0.003700000001117587`.
    /// Magnitudes below 1e-4 or from 1e16 up use an exponent (`1e-7`).
    /// `value` should be an element of this dtype, as
    /// [`decode_element`](Self::decode_element) widens it; integer dtypes
    /// and `bool` print as they are.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare_compat::DType;
    ///
    /// let element = f64::from(-0.0037f32);
    /// assert_eq!(DType::Float32.shortest_decimal(element), "-0.0037");
    /// // float16 holds 0.0999755859375 for 0.1.
    /// assert_eq!(DType::Float16.shortest_decimal(0.0999755859375), "0.1");
    /// assert_eq!(DType::Float64.shortest_decimal(1e-7), "1e-7");
    /// ```
    pub fn shortest_decimal(self, value: f64) -> String {
        if value.is_nan() {
            return "nan".to_owned();
        }
        if value.is_infinite() {
            return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
        }
        let exponent_form = value != 0.0 && !(1e-4..1e16).contains(&value.abs());
        let show = |shortest: &dyn ShortestDecimal| {
            if exponent_form {
                format!("{shortest:e}")
            } else {
                format!("{shortest}")
            }
        };
        match self.significand() {
            // Rust prints the shortest decimal that reads back as the same
            // f64 or f32.
            None | Some(Significand::FLOAT64) => show(&value),
            Some(Significand::FLOAT32) => show(&(value as f32)),
            Some(significand) => {
                // Fewest significant digits that round back to `value`;
                // `bits` binary digits need at most 2 + bits * log10(2).
                let most = 2 + (significand.bits as usize * 3).div_ceil(10);
                let digits = (1..most)
                    .find(|&digits| {
                        let text = format!("{value:.*e}", digits - 1);
                        text.parse::<f64>()
                            .is_ok_and(|back| significand.round(back) == value)
                    })
                    .unwrap_or(most);
                let text = format!("{value:.*e}", digits - 1);
                show(&text.parse::<f64>().unwrap_or(value))
            }
        }
    }

    /// The precision of a floating-point dtype (of each part, for complex).
    fn significand(self) -> Option<Significand> {
        Some(match self {
            DType::Float16 | DType::Complex32 => FLOAT16.significand(),
            DType::BFloat16 | DType::BComplex32 => Significand::BFLOAT16,
            DType::Float32 | DType::Complex64 => Significand::FLOAT32,
            DType::Float64 | DType::Complex128 => Significand::FLOAT64,
            DType::Float8E4M3Fn => FLOAT8_E4M3FN.significand(),
            DType::Float8E4M3FnUz => FLOAT8_E4M3FNUZ.significand(),
            DType::Float8E5M2 => FLOAT8_E5M2.significand(),
            DType::Float8E5M2FnUz => FLOAT8_E5M2FNUZ.significand(),
            DType::Float8E8M0Fnu => Significand::FLOAT8_E8M0FNU,
            DType::Float4E2M1FnX2 => FLOAT4_E2M1FN.significand(),
            _ => return None,
        })
    }
}

/// A float Rust prints as its shortest round-tripping decimal.
trait ShortestDecimal: std::fmt::Display + std::fmt::LowerExp {}

impl ShortestDecimal for f64 {}
impl ShortestDecimal for f32 {}

/// A binary float format's significand width (with the implicit bit) and
/// its least normal exponent, below which values are subnormal.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Significand {
    bits: u32,
    min_exponent: i32,
}

impl Significand {
    const FLOAT32: Significand = Significand {
        bits: f32::MANTISSA_DIGITS,
        // `MIN_EXP` is one more than the least normal exponent.
        min_exponent: f32::MIN_EXP - 1,
    };
    const FLOAT64: Significand = Significand {
        bits: f64::MANTISSA_DIGITS,
        min_exponent: f64::MIN_EXP - 1,
    };
    /// float32's exponents, fewer significand bits.
    const BFLOAT16: Significand = Significand {
        bits: f32::MANTISSA_DIGITS - BFLOAT16_DROPPED_BITS,
        ..Significand::FLOAT32
    };
    /// A power of two has one significant bit, and every encoding is
    /// normal, down to exponent `-bias`.
    const FLOAT8_E8M0FNU: Significand = Significand {
        bits: 1,
        min_exponent: -FLOAT8_E8M0FNU_BIAS,
    };

    /// `value` rounded to the nearest number with this many significant
    /// bits (fewer when subnormal). The exponent range above is not
    /// checked: only values near an element of the format are rounded.
    fn round(self, value: f64) -> f64 {
        if value == 0.0 || !value.is_finite() {
            return value;
        }
        let exponent = (value.abs().log2().floor() as i32).max(self.min_exponent);
        let scale = 2f64.powi(self.bits as i32 - 1 - exponent);
        (value * scale).round_ties_even() / scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for dtype in DType::ALL {
            assert_eq!(DType::from_name(dtype.name()), Some(dtype));
        }
        assert_eq!(DType::from_name("cfloat"), Some(DType::Complex64));
        assert_eq!(DType::from_name("float7"), None);
    }

    #[test]
    fn legacy_classes_round_trip() {
        for dtype in DType::ALL {
            if let Some(class) = dtype.legacy_storage_class() {
                assert_eq!(DType::from_legacy_storage_class(class), Some(dtype));
            }
        }
    }

    #[test]
    fn minifloats_decode_known_values() {
        assert_eq!(
            DType::Float16.decode_element(&[0x00, 0x3c]),
            Some(Scalar::Float(1.0))
        );
        assert_eq!(
            DType::Float16.decode_element(&[0x00, 0xfc]),
            Some(Scalar::Float(f64::NEG_INFINITY))
        );
        assert_eq!(
            DType::BFloat16.decode_element(&[0xc0, 0x3f]),
            Some(Scalar::Float(1.5))
        );
        // e4m3fn: 0x7e is the largest finite value, 448; 0x7f is NaN.
        assert_eq!(
            DType::Float8E4M3Fn.decode_element(&[0x7e]),
            Some(Scalar::Float(448.0))
        );
        assert!(
            matches!(DType::Float8E4M3Fn.decode_element(&[0x7f]), Some(Scalar::Float(x)) if x.is_nan())
        );
        // e5m2: 0x7b is 57344, 0x7c is inf.
        assert_eq!(
            DType::Float8E5M2.decode_element(&[0x7b]),
            Some(Scalar::Float(57344.0))
        );
        assert_eq!(
            DType::Float8E5M2.decode_element(&[0x7c]),
            Some(Scalar::Float(f64::INFINITY))
        );
        assert!(
            matches!(DType::Float8E4M3FnUz.decode_element(&[0x80]), Some(Scalar::Float(x)) if x.is_nan())
        );
        assert_eq!(
            DType::Float8E8M0Fnu.decode_element(&[127]),
            Some(Scalar::Float(1.0))
        );
        assert_eq!(DType::Int8.decode_element(&[0xff]), Some(Scalar::Int(-1)));
        assert_eq!(DType::Float32.decode_element(&[0; 3]), None);
    }

    /// Every finite element of `dtype`, sorted, each with whether its
    /// encoding is even: the element round-to-nearest-even picks on a tie.
    fn finite_elements(dtype: DType) -> Vec<(f64, bool)> {
        let encodings = match dtype {
            // One float per nibble; the low one decodes first.
            DType::Float4E2M1FnX2 => 0..16,
            _ => 0..1 << (8 * dtype.element_size()),
        };
        let mut elements: Vec<(f64, bool)> = encodings
            .filter_map(|bits: u32| {
                let bytes = bits.to_le_bytes();
                let value = match dtype.decode_element(&bytes[..dtype.element_size()])? {
                    Scalar::Float(value) | Scalar::PackedFloat4(value, _) => value,
                    other => panic!("{dtype} decodes to {other:?}"),
                };
                value.is_finite().then_some((value, bits.is_multiple_of(2)))
            })
            .collect();
        elements.sort_by(|a, b| a.0.total_cmp(&b.0));
        elements
    }

    /// The element of `elements` a decimal reads back as: the nearest, the
    /// even one on a tie. Past either end, one more step of the spacing
    /// there stands for the overflow, which is no element.
    fn read_back(elements: &[(f64, bool)], decimal: &str) -> f64 {
        let value: f64 = decimal.parse().unwrap();
        let beyond = |(edge, even): (f64, bool), (next, _): (f64, bool)| (2.0 * edge - next, !even);
        let at = elements.partition_point(|&(element, _)| element < value);
        let (below, below_even) = match at.checked_sub(1) {
            Some(below) => elements[below],
            None => beyond(elements[0], elements[1]),
        };
        let (above, _) = match elements.get(at) {
            Some(&above) => above,
            None => beyond(elements[at - 1], elements[at - 2]),
        };
        let (to_below, to_above) = (value - below, above - value);
        if to_below < to_above || (to_below == to_above && below_even) {
            below
        } else {
            above
        }
    }

    /// Checks the precision each format's shortest decimals are cut to
    /// against the elements themselves, so that it cannot drift from the
    /// layouts the elements are decoded with.
    #[test]
    fn shortest_decimals_read_back_as_their_element_and_one_digit_fewer_would_not() {
        // Every real float format narrower than float32: the ones whose
        // decimals `Significand::round` cuts, and whose encodings can all be
        // listed (the complex ones are 4 bytes and more).
        let formats = DType::ALL
            .into_iter()
            .filter(|dtype| dtype.significand().is_some() && dtype.element_size() <= 2);
        for dtype in formats {
            let elements = finite_elements(dtype);
            for &(element, _) in &elements {
                let shortest = dtype.shortest_decimal(element);
                assert_eq!(
                    read_back(&elements, &shortest),
                    element,
                    "{dtype} {element} as {shortest}"
                );
                let digits = format!("{:e}", shortest.parse::<f64>().unwrap())
                    .split('e')
                    .next()
                    .unwrap()
                    .bytes()
                    .filter(u8::is_ascii_digit)
                    .count();
                if digits > 1 {
                    let fewer = format!("{element:.*e}", digits - 2);
                    assert_ne!(
                        read_back(&elements, &fewer),
                        element,
                        "{dtype} {element} as {fewer}, shorter than {shortest}"
                    );
                }
            }
        }
    }
}
