// Draws the report's charts and makes its tables sortable; ROOT_ID: the report root's id (render/html.py).
(function (root) {
  try { window.nsightStepView.install(root); } catch (error) { console.error(error); }  // the charts still draw
  root.querySelectorAll("[data-nsr-spec]").forEach(function (element) {
    var spec = JSON.parse(document.getElementById(element.getAttribute("data-nsr-spec")).textContent);
    vegaEmbed(element, spec, {renderer: "svg", actions: false}).catch(function (error) {
      element.textContent = "This chart could not be drawn: " + error;
      console.error(error);
    });
  });
  root.querySelectorAll("table.nsr-sortable").forEach(function (table) {
    var headers = table.querySelectorAll("th");
    headers.forEach(function (header, column) {
      header.addEventListener("click", function () {
        var descending = header.getAttribute("aria-sort") !== "descending";
        headers.forEach(function (other) { other.removeAttribute("aria-sort"); });
        header.setAttribute("aria-sort", descending ? "descending" : "ascending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[column], y = b.cells[column];
          var nx = parseFloat(x.getAttribute("data-v")), ny = parseFloat(y.getAttribute("data-v"));
          var order = (isNaN(nx) || isNaN(ny)) ? x.textContent.localeCompare(y.textContent) : nx - ny;
          return descending ? -order : order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})(document.getElementById(ROOT_ID));
