def pct: if .den == 0 then "-" else "\((.num * 1000 / .den | round) / 10) (\(.num)/\(.den))" end;
def total: .classes[-1];
def row(name; a; l): "| \(name) | \(a.handovers) | \(a.failures) | \(a.reported) | \(a.precision | pct) | \(a.recall_reported | pct) | \(a.recall | pct) | \(l.precision | pct) | \(l.recall_reported | pct) | \(l.recall | pct) |";
def sum(f): {num: (map(f.num) | add), den: (map(f.den) | add)};
"| capture | handovers | failures | reported | Alg. 1 precision | Alg. 1 recall (reported) | Alg. 1 recall | learning precision | learning recall (reported) | learning recall |",
"|---|---|---|---|---|---|---|---|---|---|",
(.[] | row(.input | split("/") | last; .predictors[0] | total; .predictors[1] | total)),
([.[] | .predictors[0] | total] as $a | [.[] | .predictors[1] | total] as $l |
  row("**all captures**";
    {handovers: ($a | map(.handovers) | add), failures: ($a | map(.failures) | add), reported: ($a | map(.reported) | add),
     precision: ($a | sum(.precision)), recall_reported: ($a | sum(.recall_reported)), recall: ($a | sum(.recall))};
    {precision: ($l | sum(.precision)), recall_reported: ($l | sum(.recall_reported)), recall: ($l | sum(.recall))}))
