/*
 * plot.c — `compare --plot FILE.svg`: reserved and in-use bytes over the
 * trace, one colour per policy (reserved solid, in use dashed), written as a
 * standalone SVG file that any browser or document shows.
 *
 * Samples are taken after every batch fed to the simulators; when a series
 * is full, neighbouring points merge keeping the larger values, so a peak
 * between two kept points is never lost (the drawn peak is the true peak of
 * the samples). Entry points: plot_init, plot_add, plot_write_svg,
 * plot_free.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay_tool.h"

#define W 960
#define H 440
#define ML 80 /* left margin: the byte axis */
#define MR 20
#define MT 48 /* top: title and legend */
#define MB 44 /* bottom: the event axis */

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c",
                                      "#9467bd", "#ff7f0e", "#8c564b",
                                      "#e377c2", "#17becf"};
#define NCOLOURS (sizeof colours / sizeof colours[0])

int plot_init(tool_plot *p, size_t nseries) {
  memset(p, 0, sizeof *p);
  if (nseries == 0 || nseries > PLOT_MAX_SERIES)
    return AA_EINVAL;
  p->pts = calloc(nseries * PLOT_MAX_POINTS, sizeof *p->pts);
  if (p->pts == NULL)
    return AA_ENOMEM;
  p->nseries = nseries;
  p->stride = 1;
  return AA_OK;
}

void plot_free(tool_plot *p) {
  free(p->pts);
  memset(p, 0, sizeof *p);
}

/* Halves every series: point i becomes the larger of points 2i and 2i+1. */
static void plot_halve(tool_plot *p) {
  size_t s, i;
  for (s = 0; s < p->nseries; s++) {
    tool_plot_point *a = &p->pts[s * PLOT_MAX_POINTS];
    for (i = 0; i < p->npoints / 2; i++) {
      tool_plot_point x = a[2 * i], y = a[2 * i + 1];
      a[i].events = y.events;
      a[i].in_use = x.in_use > y.in_use ? x.in_use : y.in_use;
      a[i].reserved = x.reserved > y.reserved ? x.reserved : y.reserved;
    }
    if (p->npoints % 2 != 0)
      a[i] = a[p->npoints - 1];
  }
  p->npoints = (p->npoints + 1) / 2;
  p->stride *= 2;
}

void plot_add(tool_plot *p, const aa_replay_now *now) {
  size_t s;
  if (p->pts == NULL)
    return;
  /* every stride-th call opens a point; the calls in between fold into it */
  if (p->pending == 0) {
    if (p->npoints == PLOT_MAX_POINTS)
      plot_halve(p);
    for (s = 0; s < p->nseries; s++)
      memset(&p->pts[s * PLOT_MAX_POINTS + p->npoints], 0, sizeof *p->pts);
    p->npoints++;
  }
  p->pending = (p->pending + 1) % p->stride;
  for (s = 0; s < p->nseries; s++) {
    tool_plot_point *pt = &p->pts[s * PLOT_MAX_POINTS + p->npoints - 1];
    pt->events = now[s].events;
    if (now[s].in_use > pt->in_use)
      pt->in_use = now[s].in_use;
    if (now[s].reserved > pt->reserved)
      pt->reserved = now[s].reserved;
  }
}

/* XML text: & < > " escaped, control bytes dropped. */
static void put_text(FILE *f, const char *s) {
  for (; *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '&')
      fputs("&amp;", f);
    else if (c == '<')
      fputs("&lt;", f);
    else if (c == '>')
      fputs("&gt;", f);
    else if (c == '"')
      fputs("&quot;", f);
    else if (c >= 0x20 && c != 0x7F)
      fputc(c, f);
  }
}

/* A "nice" step (1, 2 or 5 times a power of 1024 or 10) for about n ticks. */
static double nice_step(double max, int n, bool binary) {
  double raw = max / n, base = 1, m;
  if (!(raw > 0))
    return 1;
  if (binary) {
    while (base * 1024 <= raw)
      base *= 1024;
  }
  while (base * 10 <= raw)
    base *= 10;
  m = raw / base;
  return base * (m <= 1 ? 1 : m <= 2 ? 2
                          : m <= 5   ? 5
                                     : 10);
}

static void fmt_count(uint64_t v, char *buf, size_t cap) {
  if (v >= 1000000)
    snprintf(buf, cap, "%.3gM", (double)v / 1e6);
  else if (v >= 1000)
    snprintf(buf, cap, "%.3gk", (double)v / 1e3);
  else
    snprintf(buf, cap, "%llu", (unsigned long long)v);
}

int plot_write_svg(const tool_plot *p, const char *path, const char *title,
                   const char *const *labels, char *err, size_t errcap) {
  FILE *f;
  uint64_t ymax = 1, xmax = 1;
  double ystep, xstep, v;
  size_t s, i;
  const double pw = W - ML - MR, ph = H - MT - MB;
  char buf[64];

  for (s = 0; s < p->nseries; s++) {
    for (i = 0; i < p->npoints; i++) {
      const tool_plot_point *pt = &p->pts[s * PLOT_MAX_POINTS + i];
      if (pt->reserved > ymax)
        ymax = pt->reserved;
      if (pt->in_use > ymax)
        ymax = pt->in_use;
      if (pt->events > xmax)
        xmax = pt->events;
    }
  }
  ystep = nice_step((double)ymax, 5, true);
  xstep = nice_step((double)xmax, 8, false);
  ymax = (uint64_t)(ceil((double)ymax / ystep) * ystep);

  f = fopen(path, "w");
  if (f == NULL) {
    snprintf(err, errcap, "%s: cannot write the plot: %s", path, strerror(errno));
    return AA_EIO;
  }
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
          W, H, W, H);
  fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
  fputs("<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", f);
  put_text(f, title);
  fputs("</text>\n", f);
  /* grid and axes */
  fputs("<g stroke=\"#dddddd\" stroke-width=\"1\">\n", f);
  for (v = 0; v <= (double)ymax + 0.5; v += ystep) {
    double y = MT + ph - v / (double)ymax * ph;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", ML, y,
            W - MR, y);
  }
  for (v = 0; v <= (double)xmax; v += xstep) {
    double x = ML + v / (double)xmax * pw;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, MT,
            x, H - MB);
  }
  fputs("</g>\n<g fill=\"#444444\">\n", f);
  for (v = 0; v <= (double)ymax + 0.5; v += ystep) {
    double y = MT + ph - v / (double)ymax * ph;
    fmt_bytes((uint64_t)v, buf, sizeof buf);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
            ML - 6, y + 4, buf);
  }
  for (v = 0; v <= (double)xmax; v += xstep) {
    double x = ML + v / (double)xmax * pw;
    fmt_count((uint64_t)v, buf, sizeof buf);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
            x, H - MB + 16, buf);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">events into "
             "the trace</text>\n</g>\n",
          ML + pw / 2, H - 8);
  /* one polyline per series and figure; reserved solid, in use dashed */
  for (s = 0; s < p->nseries; s++) {
    const char *col = colours[s % NCOLOURS];
    int kind;
    for (kind = 0; kind < 2; kind++) {
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s "
                 "points=\"",
              col, kind == 0 ? "2" : "1.5",
              kind == 0 ? "" : " stroke-dasharray=\"5 3\"");
      for (i = 0; i < p->npoints; i++) {
        const tool_plot_point *pt = &p->pts[s * PLOT_MAX_POINTS + i];
        uint64_t b = kind == 0 ? pt->reserved : pt->in_use;
        fprintf(f, "%s%.1f,%.1f", i > 0 ? " " : "",
                ML + (double)pt->events / (double)xmax * pw,
                MT + ph - (double)b / (double)ymax * ph);
      }
      fputs("\"/>\n", f);
    }
  }
  /* legend: policy colours, then the two line styles */
  {
    double x = 10;
    for (s = 0; s < p->nseries; s++) {
      fprintf(f, "<rect x=\"%.0f\" y=\"28\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                 "<text x=\"%.0f\" y=\"38\">",
              x, colours[s % NCOLOURS], x + 16);
      put_text(f, labels[s]);
      fputs("</text>\n", f);
      x += 16 + 7.0 * (double)strlen(labels[s]) + 18;
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"34\" x2=\"%.0f\" y2=\"34\" stroke=\"#444\" "
               "stroke-width=\"2\"/><text x=\"%.0f\" y=\"38\">reserved</text>\n",
            x, x + 24, x + 28);
    x += 90;
    fprintf(f, "<line x1=\"%.0f\" y1=\"34\" x2=\"%.0f\" y2=\"34\" stroke=\"#444\" "
               "stroke-width=\"1.5\" stroke-dasharray=\"5 3\"/>"
               "<text x=\"%.0f\" y=\"38\">in use</text>\n",
            x, x + 24, x + 28);
  }
  fputs("</svg>\n", f);
  if (ferror(f) != 0 || fclose(f) != 0) {
    snprintf(err, errcap, "%s: cannot write the plot: %s", path, strerror(errno));
    return AA_EIO;
  }
  return AA_OK;
}
