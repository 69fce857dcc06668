# Charts for `bagpipe analyze --cache ... --plot-dir DIR`:
#   gnuplot -e "dir='DIR'; cache=ROWS" tools/plot_cachesim.gp     (cache: --cache, for a title)
# reads DIR/cachesim_capacity.csv and DIR/cachesim_lookahead.csv, writes DIR/hit_vs_capacity and
# DIR/hit_vs_lookahead as PNG (pngcairo, else png) or, without either, SVG.
if (!exists("dir")) dir = "."
set datafile separator ","
set datafile missing "NaN"
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,560 enhanced font ",11"; ext = ".png"
} else {
    if (strstrt(GPVAL_TERMINALS, " png ") > 0) {
        set terminal png size 900,560; ext = ".png"
    } else {
        set terminal svg size 900,560 dynamic; ext = ".svg"
    }
}
# Outside the plot: inside, its box hid the points it covered (high hit rates at small caches).
set key outside right top vertical box
# One colour per policy in both charts.
c_none = "#888888"; c_static = "#1b9e77"; c_lru = "#7570b3"; c_look = "#d95f02"
set grid
# The x ranges of the data, taken before the y range is set: stats of one column keeps only the
# values inside the y range, so caches and windows above 100 were dropped (the chart showed only
# the points below 100, or gnuplot failed when there were none).
stats dir."/cachesim_capacity.csv" using 1 skip 2 nooutput
cap_min = STATS_min; cap_max = STATS_max
stats dir."/cachesim_lookahead.csv" using 1 skip 2 nooutput
w_min = STATS_min; w_max = STATS_max
# Whether the lookahead policy has a point in each chart: none when every cache size simulated is
# below the minimum it needs ("cache too small" in analyze's table).  Its line is then drawn out of
# the y range, with a title that says why, instead of gnuplot's "no valid points" warning.
stats dir."/cachesim_capacity.csv" using (valid(5)) skip 2 nooutput
look_cap = STATS_sum > 0
stats dir."/cachesim_lookahead.csv" using (valid(2)) skip 2 nooutput
look_win = STATS_sum > 0
look_none = "lookahead: cache too small"
set ylabel "hit rate (%)"
set yrange [0:100]

# Hit rate against cache size (rows per trainer), one line per policy.
set output dir."/hit_vs_capacity".ext
set title "Hit rate vs cache size"
set xlabel "cache rows per trainer"
set logscale x
# One capacity (no --sweep-cache): a range around it, instead of gnuplot's "empty x range" warning.
if (cap_min == cap_max) { set xrange [cap_min / 2.0 : cap_max * 2.0] } else { set autoscale x }
plot dir."/cachesim_capacity.csv" using 1:2 skip 2 with linespoints lw 2 lc rgb c_none title "none", \
     ''                           using 1:3 skip 2 with linespoints lw 2 lc rgb c_static title "static top-N", \
     ''                           using 1:4 skip 2 with linespoints lw 2 lc rgb c_lru title "LRU", \
     ''                           using 1:(look_cap ? column(5) : -1) skip 2 with linespoints lw 2 lc rgb c_look \
                                  title (look_cap ? "lookahead" : look_none)
unset logscale x

# Hit rate of the lookahead policy against its window, with the others at the same cache size.
set output dir."/hit_vs_lookahead".ext
if (exists("cache")) {
    set title sprintf("Hit rate vs lookahead window (cache of %.0f rows per trainer)", cache * 1.0)
} else {
    set title "Hit rate vs lookahead window (same cache size)"
}
set xlabel "lookahead window W (batches)"
if (w_min == w_max) { set xrange [w_min - 1 : w_max + 1] } else { set autoscale x }
plot dir."/cachesim_lookahead.csv" using 1:(look_win ? column(2) : -1) skip 2 with linespoints lw 2 lc rgb c_look \
                                   title (look_win ? "lookahead" : look_none), \
     ''                            using 1:3 skip 2 with lines dt 2 lw 2 lc rgb c_lru title "LRU", \
     ''                            using 1:4 skip 2 with lines dt 3 lw 2 lc rgb c_static title "static top-N", \
     ''                            using 1:5 skip 2 with lines dt 4 lw 2 lc rgb c_none title "none"
unset output
