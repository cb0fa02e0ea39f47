//! Expected texts come from C's `printf("%.17g")` (via Python's `%`
//! operator, which follows it digit for digit), for chosen edge cases,
//! values whose 18th digit is an exact tie, and random bit patterns.

use super::format_double;
use proptest::prelude::*;

const PRINTF: &[(f64, &str)] = &[
    (f64::from_bits(0x0000000000000000), "0"),
    (f64::from_bits(0x8000000000000000), "-0"),
    (f64::from_bits(0x3ff0000000000000), "1"),
    (f64::from_bits(0xbff0000000000000), "-1"),
    (f64::from_bits(0x3fb999999999999a), "0.10000000000000001"),
    (f64::from_bits(0x3fe0000000000000), "0.5"),
    (f64::from_bits(0x3ff8000000000000), "1.5"),
    (f64::from_bits(0x4059000000000000), "100"),
    (f64::from_bits(0x4341c37937e08000), "10000000000000000"),
    (f64::from_bits(0x4376345785d8a000), "1e+17"),
    (f64::from_bits(0x4345ee2a2eb5a5c4), "12345678901234568"),
    (f64::from_bits(0x437b69b4ba630f35), "1.2345678901234568e+17"),
    (f64::from_bits(0x3f1a36e2eb1c432d), "0.0001"),
    (f64::from_bits(0x3ee4f8b588e368f1), "1.0000000000000001e-05"),
    (f64::from_bits(0x3f202e4b6ce5dc68), "0.00012344999999999999"),
    (
        f64::from_bits(0x7fefffffffffffff),
        "1.7976931348623157e+308",
    ),
    (
        f64::from_bits(0x0000000000000001),
        "4.9406564584124654e-324",
    ),
    (
        f64::from_bits(0x0010000000000000),
        "2.2250738585072014e-308",
    ),
    (f64::from_bits(0x400921fb54442d18), "3.1415926535897931"),
    (
        f64::from_bits(0xbe90c6f7a0b5ed8d),
        "-2.4999999999999999e-07",
    ),
    (f64::from_bits(0x444b1ae4d6e2ef50), "1e+21"),
    (f64::from_bits(0x4480f0cf064dd592), "1e+22"),
    (f64::from_bits(0x405edd2f1a9fbe77), "123.456"),
    (f64::from_bits(0x3fd5555555555555), "0.33333333333333331"),
    (f64::from_bits(0x3fe5555555555555), "0.66666666666666663"),
    (f64::from_bits(0x4340000000000000), "9007199254740992"),
    (f64::from_bits(0x4376345785d8a000), "1e+17"),
    (f64::from_bits(0x3fd3333333333334), "0.30000000000000004"),
    (f64::from_bits(0x3ff0000400000000), "1.0000038146972656"),
    (f64::from_bits(0x3ff0000c00000000), "1.0000114440917969"),
    (f64::from_bits(0x4000000200000000), "2.0000038146972656"),
    (f64::from_bits(0x4008000200000000), "3.0000038146972656"),
    (f64::from_bits(0x4010000100000000), "4.0000038146972656"),
    (
        f64::from_bits(0xf2a74de452e6b438),
        "-1.989032661366619e+244",
    ),
    (f64::from_bits(0x6513270e269e0d37), "7.761117632285041e+178"),
    (f64::from_bits(0x0c5c7fd0a6a3a450), "3.980498358697587e-249"),
    (
        f64::from_bits(0xd23f0824128b2f33),
        "-1.5432835417340557e+88",
    ),
    (
        f64::from_bits(0x1818e811892f902b),
        "1.3647584518757569e-192",
    ),
    (
        f64::from_bits(0x9531985d5d9dc9f8),
        "-1.3701135617873088e-206",
    ),
    (
        f64::from_bits(0xe8e25d940ed90475),
        "-1.7160537630466207e+197",
    ),
    (f64::from_bits(0x36f675cc81e74ef5), "6.2946752411953861e-44"),
    (
        f64::from_bits(0x1600a35a099950d8),
        "1.0613447212142254e-202",
    ),
    (
        f64::from_bits(0x6b0d549b6f03675a),
        "4.7083251603875462e+207",
    ),
    (f64::from_bits(0x3d9c172411e20b8f), "6.3870161585135632e-12"),
    (
        f64::from_bits(0x8d116ece1738f7d9),
        "-9.9731303785687331e-246",
    ),
    (
        f64::from_bits(0x0f21ddb66cad4a26),
        "8.7797532256802712e-236",
    ),
    (
        f64::from_bits(0x90c192cfd3ac94af),
        "-5.7955032484989932e-228",
    ),
    (
        f64::from_bits(0xf28c105d1fb17c23),
        "-5.9881801593860111e+243",
    ),
    (
        f64::from_bits(0xa170b33839263059),
        "-1.3060523885277959e-147",
    ),
    (
        f64::from_bits(0x953f48f1a09f76b5),
        "-2.4361176994848409e-206",
    ),
    (
        f64::from_bits(0x0fd630f1f29d0da9),
        "2.2333869991501741e-232",
    ),
    (
        f64::from_bits(0x95e60af593bd04cf),
        "-3.5152797062666699e-203",
    ),
    (
        f64::from_bits(0x0cb1e29c658cda14),
        "1.5987381841032883e-247",
    ),
    (f64::from_bits(0x3898d190f9ebdacc), "4.6678633181812096e-36"),
    (
        f64::from_bits(0x8e81973e0becd7b0),
        "-8.4418727921054556e-239",
    ),
    (
        f64::from_bits(0x2217beaddbc496cb),
        "1.9015657400796622e-144",
    ),
    (f64::from_bits(0x6b4cb2424a23d596), "7.370437700706684e+208"),
    (
        f64::from_bits(0x8a6a63ec24ede6a4),
        "-1.7163996725272777e-258",
    ),
    (
        f64::from_bits(0x922766581e27a1c0),
        "-3.2367190832119987e-221",
    ),
    (
        f64::from_bits(0x8f6d05584ef8aa38),
        "-2.2818334634712625e-234",
    ),
    (
        f64::from_bits(0xae97ba94d0eda82f),
        "-3.0536383926309363e-84",
    ),
    (
        f64::from_bits(0x1a61dbe22e44158b),
        "1.3449551894627777e-181",
    ),
    (
        f64::from_bits(0x923a736994e3bf91),
        "-7.3174959760626057e-221",
    ),
    (f64::from_bits(0x301850c5a38fd547), "5.2498223088143036e-77"),
    (
        f64::from_bits(0x18f135d25f557203),
        "1.5450754142984396e-188",
    ),
    (
        f64::from_bits(0xb64ce4228c38fb29),
        "-3.9536256982247919e-47",
    ),
    (
        f64::from_bits(0x907a70c31012f037),
        "-2.7249126747649799e-229",
    ),
    (
        f64::from_bits(0x9e7769b10f4205b4),
        "-6.5051418615487723e-162",
    ),
    (
        f64::from_bits(0x7f15052434b9b5df),
        "1.4414848395559941e+304",
    ),
    (
        f64::from_bits(0x881ed162ae2eb154),
        "-1.4583679262758548e-269",
    ),
    (
        f64::from_bits(0xc6f877186d76b07e),
        "-7.9394166688077208e+33",
    ),
    (
        f64::from_bits(0x7731af10506bf2ef),
        "1.4255183989699612e+266",
    ),
    (
        f64::from_bits(0xec66a78795e761d1),
        "-1.5253157012324029e+214",
    ),
    (f64::from_bits(0x5c90a9587403e430), "7.750545741548908e+137"),
    (f64::from_bits(0x3f98e2774cbd87ad), "0.024301399287089676"),
    (f64::from_bits(0x2e05319acb5c7427), "5.3269600817830169e-87"),
    (
        f64::from_bits(0xc7a2ea20b2f14c94),
        "-1.2570882301712172e+37",
    ),
    (
        f64::from_bits(0x14f4733f3e7d1bfb),
        "9.9526840090024479e-208",
    ),
    (f64::from_bits(0x4cdd2055930d6eaf), "1.8721667527122837e+62"),
    (
        f64::from_bits(0x7ebff20686734721),
        "3.4229783989470719e+302",
    ),
    (
        f64::from_bits(0x57ee05cde00902c7),
        "3.6967297937384553e+115",
    ),
    (
        f64::from_bits(0x72e6cc3ababced20),
        "3.1132849561694472e+245",
    ),
    (
        f64::from_bits(0x9be4bcfc49b64a08),
        "-2.6202582260546103e-174",
    ),
    (
        f64::from_bits(0x12bd4acefaecbd38),
        "2.0745096302730225e-218",
    ),
    (
        f64::from_bits(0x830e07bc1e398f10),
        "-5.877500503097409e-294",
    ),
    (
        f64::from_bits(0x2a3af4d46b0a18e8),
        "2.9383455973541661e-105",
    ),
    (
        f64::from_bits(0x5790f82ec1d3fcff),
        "6.5295986747658322e+113",
    ),
    (
        f64::from_bits(0xeeeacbe226e87555),
        "-1.9837344250050814e+226",
    ),
    (
        f64::from_bits(0x6bf46c697d2caf82),
        "1.0743030475716402e+212",
    ),
    (
        f64::from_bits(0xf646e1f40a097c97),
        "-5.629271400715247e+261",
    ),
    (
        f64::from_bits(0x13deef86ab1031d0),
        "5.7433106149184849e-213",
    ),
    (
        f64::from_bits(0x8ede0d7ac3baea9e),
        "-4.6151547070255599e-237",
    ),
    (f64::from_bits(0xca02135e92b1d3f2), "-3.302201168194502e+48"),
    (f64::from_bits(0x4126ead73f5098ac), "750955.62366177654"),
    (f64::from_bits(0xc116bc63e5afe5a4), "-372504.97430380643"),
    (f64::from_bits(0x4117d6faee20e260), "390590.73254731856"),
    (f64::from_bits(0x41070a1e089f4598), "188739.75421003695"),
    (f64::from_bits(0x4103817344bdb7f0), "159790.40856498433"),
    (f64::from_bits(0xc0f5625565fa9438), "-87589.337397173862"),
    (f64::from_bits(0x4124bfff1f3eadfe), "679935.56102508283"),
    (f64::from_bits(0x412b24246163f9a4), "889362.19021587493"),
    (f64::from_bits(0xc0e94b6a67b76f80), "-51803.325160711072"),
    (f64::from_bits(0x411409c1a4cfe7f8), "328304.41094934894"),
    (f64::from_bits(0xc12ad08a4a23f456), "-878661.14480556059"),
    (f64::from_bits(0x411898a02ba1a760), "402984.04260884784"),
    (f64::from_bits(0x4111f5c6d6129a38), "294257.70905533759"),
    (f64::from_bits(0x412e189fc2038a94), "986191.87893326813"),
    (f64::from_bits(0x4123a613257d0460), "643849.5732194297"),
    (f64::from_bits(0xc11a4b63be456c36), "-430808.93581170158"),
    (f64::from_bits(0xc10be208ebbcff6c), "-228417.11510657833"),
    (f64::from_bits(0x41149665ba217d40), "337305.43176837638"),
    (f64::from_bits(0xc12d23f449abcbb9), "-954874.14388882287"),
    (f64::from_bits(0xc0f2b416d6a1df98), "-76609.427400468267"),
    (f64::from_bits(0xc12442be7bffec3c), "-663903.24218691094"),
    (f64::from_bits(0xc1275ee0d2736181), "-765808.41103653621"),
    (f64::from_bits(0xc12aeb56529ad01e), "-882091.16133737913"),
    (f64::from_bits(0x41205f23f43223f6), "536465.97694504145"),
    (f64::from_bits(0xc1269f8f1ca72250), "-741319.55596263148"),
    (f64::from_bits(0xc11ecf095496b653), "-504770.33260617143"),
    (f64::from_bits(0xc10a9fa4bff75f90), "-218100.59373354586"),
    (f64::from_bits(0x4126ab77e5815d58), "742843.94825259876"),
    (f64::from_bits(0xc129996acb9230dc), "-838837.39759972272"),
    (f64::from_bits(0xc0f8cf932b6c4f08), "-101625.19810133812"),
];

/// Values exactly halfway between two 17-digit decimals: printf rounds
/// them to even.
const TIES: &[(f64, &str)] = &[
    (f64::from_bits(0x3ff0000800000000), "1.0000076293945312"),
    (f64::from_bits(0x3fb999c000000000), "0.10000228881835938"),
    (f64::from_bits(0x3f847b0000000000), "0.010000228881835938"),
    (f64::from_bits(0x3f50640000000000), "0.0010004043579101562"),
    (f64::from_bits(0x3f1a600000000000), "0.00010061264038085938"),
    (f64::from_bits(0x3ee5800000000000), "1.0251998901367188e-05"),
    (f64::from_bits(0x3eb2000000000000), "1.0728836059570312e-06"),
    (f64::from_bits(0x3e88000000000000), "1.7881393432617188e-07"),
    (f64::from_bits(0x3e60000000000000), "2.9802322387695312e-08"),
];

#[test]
fn matches_printf() {
    for &(f, want) in PRINTF.iter().chain(TIES) {
        let got = format_double(f);
        assert_eq!(got.as_bytes(), want.as_bytes(), "{f:e}");
    }
}

#[test]
fn specials() {
    assert_eq!(format_double(f64::NAN).as_bytes(), b"nan");
    assert_eq!(format_double(f64::INFINITY).as_bytes(), b"inf");
    assert_eq!(format_double(f64::NEG_INFINITY).as_bytes(), b"-inf");
}

proptest! {
    #[test]
    fn round_trips(bits in any::<u64>()) {
        let f = f64::from_bits(bits);
        let text = format_double(f);
        let text = std::str::from_utf8(text.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: f64 = text.parse().map_err(|_| TestCaseError::fail(text.to_string()))?;
        if f.is_nan() {
            prop_assert!(back.is_nan());
        } else {
            prop_assert_eq!(back.to_bits(), f.to_bits(), "{}", text);
        }
    }
}
