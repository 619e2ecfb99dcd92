package npb

import "fmt"

// Problem sizes, iteration counts and reference values per class, from
// NPB 3.4 (sys/setparams.c and each kernel's verification code; see
// ../shared/npb/verification.md in the jiarun tree).

// Classes lists the classes every kernel supports, smallest first.
const Classes = "SWABC"

func checkClass(kernel string, class byte) error {
	for i := 0; i < len(Classes); i++ {
		if Classes[i] == class {
			return nil
		}
	}
	return fmt.Errorf("npb: %s: unknown class %q (want one of S, W, A, B, C)", kernel, class)
}

// epParams: 2^m Gaussian pairs attempted; reference sums (EP/ep.f:274-299).
type epParams struct {
	m      int
	sx, sy float64
}

var epClasses = map[byte]epParams{
	'S': {24, -3.247834652034740e+3, -6.958407078382297e+3},
	'W': {25, -2.863319731645753e+3, -6.320053679109499e+3},
	'A': {28, -4.295875165629892e+3, -1.580732573678431e+4},
	'B': {30, 4.033815542441498e+4, -2.660669192809235e+4},
	'C': {32, 4.764367927995374e+4, -8.084072988043731e+4},
}

// isParams: 2^totalKeysLog2 keys in [0, 2^maxKeyLog2), 2^numBucketsLog2
// buckets; the five test keys and their ranks (IS/is.c:56-125, 263-295).
type isParams struct {
	totalKeysLog2, maxKeyLog2, numBucketsLog2 int
	testIndex, testRank                       [isTestArraySize]int64
}

const (
	isMaxIterations = 10
	isTestArraySize = 5
)

var isClasses = map[byte]isParams{
	'S': {16, 11, 9, [5]int64{48427, 17148, 23627, 62548, 4431}, [5]int64{0, 18, 346, 64917, 65463}},
	'W': {20, 16, 10, [5]int64{357773, 934767, 875723, 898999, 404505}, [5]int64{1249, 11698, 1039987, 1043896, 1048018}},
	'A': {23, 19, 10, [5]int64{2112377, 662041, 5336171, 3642833, 4250760}, [5]int64{104, 17523, 123928, 8288932, 8388264}},
	'B': {25, 21, 10, [5]int64{41869, 812306, 5102857, 18232239, 26860214}, [5]int64{33422937, 10244, 59149, 33135281, 99}},
	'C': {27, 23, 10, [5]int64{44172927, 72999161, 74326391, 129606274, 21736814}, [5]int64{61147, 882988, 266290, 133997595, 133525895}},
}

// isExpectedRank is the rank test key j must have at iteration it
// (IS/is.c partial verification; the shifts differ per class).
func isExpectedRank(class byte, j, it int, testRank int64) int64 {
	r, k := testRank, int64(it)
	switch class {
	case 'S', 'C':
		if j <= 2 {
			return r + k
		}
		return r - k
	case 'W':
		if j < 2 {
			return r + k - 2
		}
		return r - k
	case 'A':
		if j <= 2 {
			return r + k - 1
		}
		return r - (k - 1)
	case 'B':
		if j == 1 || j == 2 || j == 4 {
			return r + k
		}
		return r - k
	}
	return -1
}

// cgParams (sys/setparams.c:640-678, CG/cg.f:101-151).
type cgParams struct {
	na, nonzer, niter int
	shift, zeta       float64
}

const (
	cgRcond  = 0.1
	cgItMax  = 25 // CG steps per outer iteration (cgitmax)
	cgEps    = 1e-10
	epEps    = 1e-8
	mgEps    = 1e-8
	ftEps    = 1e-12
	ftAlpha  = 1e-6
	mgRanDim = 10 // mm in zran3: ten +1 and ten -1 charges
)

var cgClasses = map[byte]cgParams{
	'S': {1400, 7, 15, 10, 8.5971775078648},
	'W': {7000, 8, 15, 12, 10.362595087124},
	'A': {14000, 11, 15, 20, 17.130235054029},
	'B': {75000, 13, 75, 60, 22.712745482631},
	'C': {150000, 15, 75, 110, 28.973605592845},
}

// mgParams: grid n^3 (n = 2^lt), nit V-cycles, smoother S(a) or S(b), and
// the reference L2 norm of the final residual (MG/mg.f:175-330). Class W is
// the NPB 3.3+ definition (128^3, 4 iterations).
type mgParams struct {
	lt, nit int
	smoothB bool
	rnm2    float64
}

var mgClasses = map[byte]mgParams{
	'S': {5, 4, false, 0.5307707005734e-04},
	'W': {7, 4, false, 0.6467329375339e-05},
	'A': {8, 4, false, 0.2433365309069e-05},
	'B': {8, 20, true, 0.1800564401355e-05},
	'C': {9, 20, true, 0.5706732285740e-06},
}

// ftParams: grid nx*ny*nz, niter time steps and the reference checksums
// (sys/setparams.c:680-710, FT/ft.f:1869-2080).
type ftParams struct {
	nx, ny, nz, niter int
	sums              []complex128
}

var ftClasses = map[byte]ftParams{
	'S': {64, 64, 64, 6, []complex128{
		complex(5.546087004964e+02, 4.845363331978e+02),
		complex(5.546385409189e+02, 4.865304269511e+02),
		complex(5.546148406171e+02, 4.883910722336e+02),
		complex(5.545423607415e+02, 4.901273169046e+02),
		complex(5.544255039624e+02, 4.917475857993e+02),
		complex(5.542683411902e+02, 4.932597244941e+02),
	}},
	'W': {128, 128, 32, 6, []complex128{
		complex(5.673612178944e+02, 5.293246849175e+02),
		complex(5.631436885271e+02, 5.282149986629e+02),
		complex(5.594024089970e+02, 5.270996558037e+02),
		complex(5.560698047020e+02, 5.260027904925e+02),
		complex(5.530898991250e+02, 5.249400845633e+02),
		complex(5.504159734538e+02, 5.239212247086e+02),
	}},
	'A': {256, 256, 128, 6, []complex128{
		complex(5.046735008193e+02, 5.114047905510e+02),
		complex(5.059412319734e+02, 5.098809666433e+02),
		complex(5.069376896287e+02, 5.098144042213e+02),
		complex(5.077892868474e+02, 5.101336130759e+02),
		complex(5.085233095391e+02, 5.104914655194e+02),
		complex(5.091487099959e+02, 5.107917842803e+02),
	}},
	'B': {512, 256, 256, 20, []complex128{
		complex(5.177643571579e+02, 5.077803458597e+02),
		complex(5.154521291263e+02, 5.088249431599e+02),
		complex(5.146409228649e+02, 5.096208912659e+02),
		complex(5.142378756213e+02, 5.101023387619e+02),
		complex(5.139626667737e+02, 5.103976610617e+02),
		complex(5.137423460082e+02, 5.105948019802e+02),
		complex(5.135547056878e+02, 5.107404165783e+02),
		complex(5.133910925466e+02, 5.108576573661e+02),
		complex(5.132470705390e+02, 5.109577278523e+02),
		complex(5.131197729984e+02, 5.110460304483e+02),
		complex(5.130070319283e+02, 5.111252433800e+02),
		complex(5.129070537032e+02, 5.111968077718e+02),
		complex(5.128182883502e+02, 5.112616233064e+02),
		complex(5.127393733383e+02, 5.113203605551e+02),
		complex(5.126691062020e+02, 5.113735928093e+02),
		complex(5.126064276004e+02, 5.114218460548e+02),
		complex(5.125504076570e+02, 5.114656139760e+02),
		complex(5.125002331720e+02, 5.115053595966e+02),
		complex(5.124551951846e+02, 5.115415130407e+02),
		complex(5.124146770029e+02, 5.115744692211e+02),
	}},
	'C': {512, 512, 512, 20, []complex128{
		complex(5.195078707457e+02, 5.149019699238e+02),
		complex(5.155422171134e+02, 5.127578201997e+02),
		complex(5.144678022222e+02, 5.122251847514e+02),
		complex(5.140150594328e+02, 5.121090289018e+02),
		complex(5.137550426810e+02, 5.121143685824e+02),
		complex(5.135811056728e+02, 5.121496764568e+02),
		complex(5.134569343165e+02, 5.121870921893e+02),
		complex(5.133651975661e+02, 5.122193250322e+02),
		complex(5.132955192805e+02, 5.122454735794e+02),
		complex(5.132410471738e+02, 5.122663649603e+02),
		complex(5.131971141679e+02, 5.122830879827e+02),
		complex(5.131605205716e+02, 5.122965869718e+02),
		complex(5.131290734194e+02, 5.123075927445e+02),
		complex(5.131012720314e+02, 5.123166486553e+02),
		complex(5.130760908195e+02, 5.123241541685e+02),
		complex(5.130528295923e+02, 5.123304037599e+02),
		complex(5.130310107773e+02, 5.123356167976e+02),
		complex(5.130103090133e+02, 5.123399592211e+02),
		complex(5.129905029333e+02, 5.123435588985e+02),
		complex(5.129714421109e+02, 5.123465164008e+02),
	}},
}
