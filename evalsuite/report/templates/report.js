// Sorting, paging, filtering and search for the evalsuite report. It only reorders and hides elements that are already in
// the page (never builds HTML from strings), so no model output can become markup here.
(function () {
  "use strict";

  function cellValue(row, idx, numeric) {
    var cell = row.children[idx];
    var v = cell ? cell.getAttribute("data-v") : "";
    if (!numeric) { return (v === null ? (cell ? cell.textContent : "") : v).toLowerCase(); }
    var x = parseFloat(v);
    return isNaN(x) ? null : x;
  }

  function sortBy(table, th) {
    var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute("data-type") === "num";
    var asc = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, idx, numeric), y = cellValue(b, idx, numeric);
      if (x === y) { return 0; }
      if (x === null || x === "") { return 1; }     // missing values stay at the bottom
      if (y === null || y === "") { return -1; }
      return (x < y ? -1 : 1) * (asc ? 1 : -1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th) {
      th.addEventListener("click", function () { sortBy(table, th); });
    });
  });

  // A browser (captions, questions): its .item elements, filtered by a flag (data-flags) and a search
  // text (matched against each item's text), shown a page at a time. Only the `hidden` property changes.
  document.querySelectorAll(".browser").forEach(function (br) {
    var items = Array.prototype.slice.call(br.querySelectorAll(".item"));
    var texts = items.map(function (it) { return it.textContent.toLowerCase(); });
    var size = parseInt(br.getAttribute("data-page-size"), 10) || 10;
    var filter = br.querySelector(".filter"), search = br.querySelector(".search");
    var pager = br.querySelector(".pager"), count = br.querySelector(".count");
    var page = 0, pages = 1;
    var update = function () {
      var flag = filter ? filter.value : "";
      var query = search ? search.value.trim().toLowerCase() : "";
      var matches = [];
      items.forEach(function (it, i) {
        var flags = " " + (it.getAttribute("data-flags") || "") + " ";
        if ((!flag || flags.indexOf(" " + flag + " ") >= 0) && (!query || texts[i].indexOf(query) >= 0)) {
          matches.push(i);
        }
      });
      pages = Math.max(1, Math.ceil(matches.length / size));
      page = Math.max(0, Math.min(pages - 1, page));
      var shown = {};
      matches.slice(page * size, (page + 1) * size).forEach(function (i) { shown[i] = true; });
      items.forEach(function (it, i) { it.hidden = !shown[i]; });
      if (count) { count.textContent = matches.length + " of " + items.length + " match"; }
      if (pager) {
        pager.querySelector(".pageno").textContent = String(page + 1);
        pager.querySelector(".pages").textContent = String(pages);
        pager.querySelector('[data-step="-1"]').disabled = page === 0;
        pager.querySelector('[data-step="1"]').disabled = page >= pages - 1;
      }
    };
    if (filter) { filter.addEventListener("change", function () { page = 0; update(); }); }
    if (search) { search.addEventListener("input", function () { page = 0; update(); }); }
    if (pager) {
      pager.querySelectorAll("button").forEach(function (b) {
        b.addEventListener("click", function () {
          page += parseInt(b.getAttribute("data-step"), 10);
          update();
          br.scrollIntoView();
        });
      });
    }
    update();
  });
  document.documentElement.setAttribute("data-js-ready", "1");
})();
