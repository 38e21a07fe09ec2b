// One entry per question type: how Decision Studio offers it in the ad-hoc
// form and draws its answer. A new question type adds its entry here.
//
//   label       the form's type menu entry
//   options     the question needs a comma-separated option list
//   none        "none of these" may be added (`none_of_these: true`)
//   answer(a)   the answer's text on its card
//   picked(a, name, top)  whether an option's bar is marked as the answer
//   bars        the aria label of the bars, by question id
//   confidence  the words before the card's confidence
//   checkboxes  each bar gets a (read-only) tick for "selected"

const single = {
  options: true,
  answer: (a) => {
    if (a.answer !== undefined && a.answer !== null) return String(a.answer);
    for (const k of ["choice", "level"]) if (typeof a[k] === "string") return a[k];
    if (typeof a.label === "string") return a.label;
    return "—";
  },
  picked: (a, name, top) => Boolean(top && top[0] === name),
  bars: (qid) => `Probabilities for ${qid}`,
  confidence: "Confidence",
  checkboxes: false,
};

export const KINDS = {
  boolean: { ...single, label: "boolean (yes / no)", options: false, none: false },
  choice: { ...single, label: "choice (one of the options)", none: true },
  score: { ...single, label: "score (levels, lowest first)", none: false },
  multi: {
    ...single,
    label: "multi (any of the options)",
    none: true,
    answer: (a) => (a.multi.length ? a.multi.join(", ") : "none selected"),
    picked: (a, name) => a.multi.includes(name),
    bars: (qid) => `Probability that each option applies, for ${qid}`,
    confidence: "Confidence in this set",
    checkboxes: true,
  },
};

/** The entry of an answer object: by its wire `type` (`noul` is boolean). */
export function kindOf(a) {
  if (Array.isArray(a.multi)) return KINDS.multi;
  // A multi answer without its list of selected options is drawn as a
  // plain distribution.
  if (a.type === "multi") return single;
  const name = a.type === "noul" ? "boolean" : a.type;
  return KINDS[name] || single;
}
