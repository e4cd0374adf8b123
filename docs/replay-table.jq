def pct: if .den == 0 then "-" else "\((.num * 1000 / .den | round) / 10) (\(.num)/\(.den))" end;
# The row of every class together ("class": "overall") is the last one.
def overall: .classes[-1];
def row(name; a; l): "| \(name) | \(a.handovers) | \(a.failures) | \(a.reported) | \(a.precision | pct) | \(a.recall_reported | pct) | \(a.recall | pct) | \(l.precision | pct) | \(l.recall_reported | pct) | \(l.recall | pct) |";
def sum(f): {num: (map(f.num) | add), den: (map(f.den) | add)};
"| capture | handovers | failures | reported | Alg. 1 precision | Alg. 1 recall (reported) | Alg. 1 recall | learning precision | learning recall (reported) | learning recall |",
"|---|---|---|---|---|---|---|---|---|---|",
(.[] | row(.input | split("/") | last; .predictors[0] | overall; .predictors[1] | overall)),
([.[] | .predictors[0] | overall] as $a | [.[] | .predictors[1] | overall] as $l |
  row("**all captures**";
    {handovers: ($a | map(.handovers) | add), failures: ($a | map(.failures) | add), reported: ($a | map(.reported) | add),
     precision: ($a | sum(.precision)), recall_reported: ($a | sum(.recall_reported)), recall: ($a | sum(.recall))};
    {precision: ($l | sum(.precision)), recall_reported: ($l | sum(.recall_reported)), recall: ($l | sum(.recall))}))
