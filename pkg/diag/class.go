package diag

import "slices"

// The paper's handover classes, by the bands of the cells that carry the
// data before and after the handover.
const (
	ClassSub6Sub6     = "sub6_sub6"
	ClassSub6MmWave   = "sub6_mmwave"
	ClassMmWaveMmWave = "mmwave_mmwave"
	ClassMmWaveSub6   = "mmwave_sub6"
)

// HandoverClasses are the classes in the paper's order.
var HandoverClasses = []string{ClassSub6Sub6, ClassSub6MmWave, ClassMmWaveMmWave, ClassMmWaveSub6}

// AllClasses is the key of the row or column of every class together,
// beside the class keys (JSON "class" fields and map keys of the
// evaluation's results and of m2hod replay).
const AllClasses = "overall"

// AllClassesLabel heads the row or column of every class together.
const AllClassesLabel = "Overall"

// ClassesWithAll lists HandoverClasses in the paper's order, then
// AllClasses: the rows of a table by class with its overall row last.
func ClassesWithAll() []string {
	return append(slices.Clone(HandoverClasses), AllClasses)
}

// classLabels are the names the paper's tables give the classes and
// their overall row.
var classLabels = map[string]string{
	ClassSub6Sub6:     "sub6-sub6",
	ClassSub6MmWave:   "sub6-mmW",
	ClassMmWaveMmWave: "mmW-mmW",
	ClassMmWaveSub6:   "mmW-sub6",
	AllClasses:        AllClassesLabel,
}

// HandoverClass is the class of a handover from a cell of band source to
// one of band target. A cell of unknown band (an LTE cell, a cell no log
// described) counts as sub-6.
func HandoverClass(source, target Band) string {
	switch {
	case source == BandMmWave && target == BandMmWave:
		return ClassMmWaveMmWave
	case source == BandMmWave:
		return ClassMmWaveSub6
	case target == BandMmWave:
		return ClassSub6MmWave
	}
	return ClassSub6Sub6
}

// ClassLabel is the paper's name of a class ("sub6-mmW"), AllClassesLabel
// for AllClasses; anything else is returned as it is.
func ClassLabel(class string) string {
	if l, ok := classLabels[class]; ok {
		return l
	}
	return class
}
