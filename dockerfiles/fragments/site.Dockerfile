COPY envkit/site/ /opt/envkit/site/
RUN sh /opt/envkit/site/apply-site.sh
